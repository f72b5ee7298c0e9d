// tests/support/alloc_counter.hpp — a count of operator new calls, for the
// tests of the "a step allocates nothing" promises (test_alloc.cpp,
// test_telemetry.cpp).
//
// The counting operator new replaces the global one for the whole test
// executable, so it is defined once, in tests/unit/test_alloc.cpp; this
// header only declares the counter. Under AddressSanitizer, which owns
// operator new, there is no counter and GNMR_TEST_COUNT_ALLOCS is 0: the
// tests that need it are compiled out.
#pragma once

#include <cstddef>

#if defined(__SANITIZE_ADDRESS__)
#define GNMR_TEST_COUNT_ALLOCS 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GNMR_TEST_COUNT_ALLOCS 0
#endif
#endif
#ifndef GNMR_TEST_COUNT_ALLOCS
#define GNMR_TEST_COUNT_ALLOCS 1
#endif

#if GNMR_TEST_COUNT_ALLOCS
namespace alloc_counter {
extern bool g_count_allocs;  // count while true
extern std::size_t g_allocs;  // operator new calls counted so far
}  // namespace alloc_counter
#endif
