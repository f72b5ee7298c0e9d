// gnmr/step/select.hpp — phase 2 of a step on the device: which
// candidates get the free recovery slots, without sorting and without a
// host round trip.
//
// Each candidate gets a 64-bit rank key that orders exactly like
// detail::ranks_before (risk descending, ties to the lower index): the risk
// mapped to an order-preserving unsigned (both zeros equal) in the high
// word, the complemented index in the low word. Keys are unique, so "the g
// best candidates" is "the keys >= the g-th largest key". That threshold is
// found by an MSB-first radix select (8 bits a pass; over the complete key
// set it stops early once the bucket holds exactly what is still needed)
// and expressed as a SelectRule
// that every unit evaluates on its own key in phase 3. All counts are
// integers: the result is exact and identical on every run.
//
// When the scheduler has at most kTopKCap slots, each block of units first
// keeps only its own top-`slots` keys (the global winners are among them),
// so the single block that runs the radix select scans nblocks*slots keys
// instead of N. tests/reference/select.hpp replays the whole
// algorithm on the host for the CPU tests.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gnmr/config.hpp"
#include "gnmr/core/half.hpp"

namespace gnmr {
namespace detail {

constexpr std::uint32_t kSelectThreads = 256;  // block size of the controller kernels
constexpr std::uint32_t kTopKCap = 32;         // per-block pre-filter up to this many slots

// Order-preserving map of a non-NaN float to uint32; +0 and -0 map alike
// (ranks_before treats them as equal, so their tie goes to the index).
GNMR_HOST_DEVICE std::uint32_t risk_key(float r) {
  const std::uint32_t u = float_to_bits(r);
  if ((u & 0x7fffffffu) == 0u) return 0x80000000u;
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// > 0 for every risk (risk_key(-inf) = 0x007fffff), so 0 can mean "not a
// candidate". a ranks before b  <=>  rank_key(a) > rank_key(b).
GNMR_HOST_DEVICE std::uint64_t rank_key(float risk, std::uint32_t unit) {
  return (static_cast<std::uint64_t>(risk_key(risk)) << 32) | (0xffffffffu - unit);
}

// Granted <=> key != 0 and (key & mask) >= prefix, unless none.
struct SelectRule {
  std::uint64_t mask;
  std::uint64_t prefix;
  std::uint32_t none;  // no grant at all this step
  std::uint32_t passes;  // radix passes run (telemetry for tests and benches)
};

GNMR_HOST_DEVICE SelectRule rule_all() { return SelectRule{0u, 0u, 0u, 0u}; }
GNMR_HOST_DEVICE SelectRule rule_none() { return SelectRule{0u, 0u, 1u, 0u}; }

GNMR_HOST_DEVICE bool rule_grants(const SelectRule& r, std::uint64_t key) {
  return key != 0u && r.none == 0u && (key & r.mask) >= r.prefix;
}

// How many candidates are granted: min(free slots, candidates).
GNMR_HOST_DEVICE std::uint32_t grants_wanted(std::uint32_t slots, std::uint32_t held,
                                             std::uint32_t candidates) {
  const std::uint32_t free_slots = held >= slots ? 0u : slots - held;
  return candidates < free_slots ? candidates : free_slots;
}

// The per-block pre-filter size, 0 when off.
GNMR_HOST_DEVICE std::uint32_t topk_per_block(std::uint32_t slots) {
  return slots <= kTopKCap ? slots : 0u;
}

constexpr int kRadixPasses = 8;
GNMR_HOST_DEVICE int radix_shift(int pass) { return 56 - 8 * pass; }

// State of the select between passes. need = how many keys of the current
// bucket (keys whose bits under mask equal prefix) are still to be granted.
struct RadixState {
  std::uint64_t mask;
  std::uint64_t prefix;
  std::uint32_t need;
  std::uint32_t done;
  std::uint32_t take_min;  // done, and the threshold is the bucket's smallest key
};

GNMR_HOST_DEVICE bool in_bucket(const RadixState& s, std::uint64_t key) {
  return key != 0u && (key & s.mask) == s.prefix;
}

// After one pass's histogram: digit d holds the need-th largest key of the
// bucket when above(d) < need <= above(d) + hist[d], above(d) being the
// count of bucket keys with a larger digit. Exactly one digit does.
GNMR_HOST_DEVICE bool radix_digit_holds(std::uint32_t above, std::uint32_t count,
                                        std::uint32_t need) {
  return above < need && need <= above + count;
}

// Once every key of the new bucket is wanted the select is done. complete:
// the keys scanned are all the candidates, and the rule can stop at this
// prefix. After the per-block pre-filter they are a subset, and the same
// prefix would also match candidates that were filtered out; the threshold
// is then the bucket's smallest key (one more pass): it is the g-th largest
// key of the subset, which holds the global top g, so it is the g-th
// largest overall.
GNMR_HOST_DEVICE void radix_advance(RadixState& s, int pass, std::uint32_t digit,
                                    std::uint32_t above, std::uint32_t count, bool complete) {
  const int sh = radix_shift(pass);
  s.need -= above;
  s.prefix |= static_cast<std::uint64_t>(digit) << sh;
  s.mask |= static_cast<std::uint64_t>(0xffu) << sh;
  if (count == s.need) {
    s.done = 1u;
    s.take_min = complete ? 0u : 1u;
  }
}

// The rule once the passes are over; min_in_bucket is only used when
// take_min is set (~0 when the bucket is empty, which cannot happen).
GNMR_HOST_DEVICE SelectRule radix_rule(const RadixState& s, std::uint64_t min_in_bucket, int passes) {
  if (s.take_min) return SelectRule{~0ull, min_in_bucket, 0u, static_cast<std::uint32_t>(passes + 1)};
  return SelectRule{s.mask, s.prefix, 0u, static_cast<std::uint32_t>(passes)};
}

}  // namespace detail
}  // namespace gnmr
