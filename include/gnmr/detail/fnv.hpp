// gnmr/detail/fnv.hpp — FNV-1a 64-bit hash, for the state blob's policy
// fingerprint and checksum (gnmr/io/state.hpp).
//
// Not cryptographic: it guards against truncation, bit rot and loading a
// blob into the wrong controller, not against deliberate forgery. Each step
// (xor a byte, multiply by an odd prime) is a bijection of the 64-bit state,
// so any change confined to one byte always changes the hash.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gnmr {
namespace detail {

constexpr std::uint64_t kFnvOffset = 0xcbf29ce484222325ull;
constexpr std::uint64_t kFnvPrime = 0x00000100000001b3ull;

inline std::uint64_t fnv1a64(const void* data, std::size_t n, std::uint64_t h = kFnvOffset) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= kFnvPrime;
  }
  return h;
}

// Hash a string including its terminating zero, so ("ab","c") != ("a","bc").
inline std::uint64_t fnv1a64_str(const char* s, std::uint64_t h) {
  for (;; ++s) {
    h ^= static_cast<unsigned char>(*s);
    h *= kFnvPrime;
    if (*s == '\0') return h;
  }
}

// Hash a 64-bit value as 8 little-endian bytes (host-independent).
inline std::uint64_t fnv1a64_u64(std::uint64_t v, std::uint64_t h) {
  for (int i = 0; i < 8; ++i) {
    h ^= (v >> (8 * i)) & 0xffu;
    h *= kFnvPrime;
  }
  return h;
}

}  // namespace detail
}  // namespace gnmr
