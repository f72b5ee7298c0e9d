// gnmr/detail/canonical.hpp — the canonical bytes of a state object: its
// values, with every byte that holds no value (padding between members, the
// one byte of an empty `struct State {}`) written as zero.
//
// Why: a state blob (gnmr/io/state.hpp) stores the policies' raw PODs. A
// struct's padding and an empty state's byte are whatever the last store
// left there (a whole-struct copy from a temporary, a kernel's store), so
// two controllers in the same state could write blobs that differ in those
// bytes: a straight run and a resumed one, a host and a device controller.
// Written through canonical_copy, the same state gives the same bytes.
//
// How: a type says where its values are. An empty type has none. A type
// with a member function `void canonical_bytes(unsigned char* out) const`
// writes its members there itself (a composition of states: PolicySet's
// UnitState, Compose's State), each through canonical_copy, into `out`
// already zeroed. Any other type is copied whole: it must have no implicit
// padding (the library's states declare an explicit, zero-initialised
// `pad_` member where alignment would leave a hole; tests/unit/
// test_canonical.cpp checks every one with the compiler's padding map).
#pragma once

#include <cstddef>
#include <cstring>
#include <type_traits>
#include <utility>

namespace gnmr {
namespace detail {

template <class T, class = void>
struct has_canonical_bytes : std::false_type {};
template <class T>
struct has_canonical_bytes<T, decltype(std::declval<const T&>().canonical_bytes(
                                  static_cast<unsigned char*>(nullptr)))> : std::true_type {};

// Writes x's canonical bytes to out[0, sizeof(T)), which must be zero.
template <class T>
inline void canonical_copy(const T& x, unsigned char* out) {
  static_assert(std::is_trivially_copyable<T>::value, "gnmr: a state must be trivially copyable");
  if constexpr (std::is_empty<T>::value) {
    (void)x;
    (void)out;
  } else if constexpr (has_canonical_bytes<T>::value) {
    x.canonical_bytes(out);
  } else {
    std::memcpy(out, &x, sizeof(T));
  }
}

// One member of `whole` (whose canonical bytes start at out) at its offset.
template <class W, class M>
inline void canonical_member(const W& whole, const M& member, unsigned char* out) {
  const std::size_t at = static_cast<std::size_t>(reinterpret_cast<const unsigned char*>(&member) -
                                                  reinterpret_cast<const unsigned char*>(&whole));
  canonical_copy(member, out + at);
}

}  // namespace detail
}  // namespace gnmr
