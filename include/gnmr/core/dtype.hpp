// gnmr/core/dtype.hpp — how a gradient is laid out in memory: dtypes and
// segments, and the one check of a segment list every backend runs.
//
// A unit's gradient is one or more segments (pointer, element count, dtype,
// unit); the host norms (gnmr/host/unit_norms.hpp), the device norm and
// AdamW plans (gnmr/plan/) and the Python binding all take this list and
// validate it here, so a bad layout gets the same message everywhere.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace gnmr {

enum class DType : std::uint8_t { kF32, kBF16, kF16 };

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "f16";
  }
  return "?";
}

// One contiguous piece of a unit's gradient. Several segments may share a
// unit (q/k/v of a layer, the shards of one tensor), in any order.
struct Segment {
  const void* data;    // numel elements of dtype
  std::uint64_t numel;  // > 0
  DType dtype;
  std::uint32_t unit;  // < num_units
};

namespace detail {

// Checks each segment, then that every unit has at least one segment (an
// uncovered unit's partial would be a meaningless 0 and its norm a fake
// "perfectly quiet" sample): mark(unit) is called for every valid segment.
template <class Mark>
void validate_segments(const Segment* segs, std::size_t n_segs, std::size_t num_units,
                       bool need_data, const char* fn, Mark&& mark) {
  // host_unit_partials runs this every step: the messages are built only
  // when they are thrown, so a valid layout allocates nothing here.
  const auto f = [fn] { return std::string("gnmr: ") + fn + ": "; };
  if (num_units == 0) throw std::invalid_argument(f() + "num_units must be >= 1");
  if (segs == nullptr && n_segs != 0) throw std::invalid_argument(f() + "null segment array");
  for (std::size_t i = 0; i < n_segs; ++i) {
    const Segment& s = segs[i];
    const auto at = [&f, i] { return f() + "segment " + std::to_string(i); };
    if (s.numel == 0) throw std::invalid_argument(at() + " is empty (numel 0)");
    if (need_data && s.data == nullptr) throw std::invalid_argument(at() + " has null data");
    if (s.dtype != DType::kF32 && s.dtype != DType::kBF16 && s.dtype != DType::kF16)
      throw std::invalid_argument(at() + " has an unknown dtype (" +
                                  std::to_string(static_cast<unsigned>(s.dtype)) + ")");
    if (s.unit >= num_units)
      throw std::invalid_argument(at() + " has unit " + std::to_string(s.unit) +
                                  ", but num_units is " + std::to_string(num_units));
    mark(s.unit);
  }
}

[[noreturn]] inline void throw_uncovered(const char* fn, std::size_t u, const char* hint = "") {
  throw std::invalid_argument(std::string("gnmr: ") + fn + ": unit " + std::to_string(u) +
                              " has no segment (its norm would be meaningless)" + hint);
}

}  // namespace detail
}  // namespace gnmr
