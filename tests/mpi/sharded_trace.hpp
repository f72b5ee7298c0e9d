// tests/mpi/sharded_trace.hpp — the MPI reducer test's data: a random layout
// of fp32 and bf16 segments cut unevenly across the ranks, a trace with
// spikes, budget contention and NaN/Inf elements in one rank's shard, the
// gradient bytes of any step, one rank's segments, and the byte records of
// what must be identical on every rank. Every value is a pure function of
// (seed, step, element), so any rank can produce any piece without sharing
// a generator state.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "gnmr/host/controller.hpp"
#include "gnmr/host/unit_norms.hpp"

namespace mpitest {

// ---- Deterministic data: a counter-based hash, so any rank can produce any
// element of any step without sharing a generator state.
inline std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
inline double u01(std::uint64_t a, std::uint64_t b = 0, std::uint64_t c = 0, std::uint64_t d = 0) {
  const std::uint64_t h = mix(mix(mix(mix(a) ^ b) ^ c) ^ d);
  return static_cast<double>(h >> 11) * (1.0 / 9007199254740992.0);
}

constexpr std::uint64_t kSeed = 20261122;
constexpr std::uint32_t kUnits = 24;
constexpr int kSteps = 300;

struct SegSpec {
  std::uint32_t unit;
  std::uint64_t numel;
  gnmr::DType dtype;
  std::vector<std::uint64_t> cuts;  // R+1 entries: rank r holds [cuts[r], cuts[r+1])
};

struct Layout {
  std::vector<SegSpec> segs;
  std::vector<double> base;  // per-unit element amplitude
};

inline Layout make_layout(int ranks) {
  Layout L;
  std::uint64_t k = 0;
  for (std::uint32_t u = 0; u < kUnits; ++u) {
    L.base.push_back(std::pow(10.0, -3.0 + 4.0 * u01(kSeed, 1, u)));
    const int nseg = 1 + static_cast<int>(u01(kSeed, 2, u) * 3.0);
    for (int s = 0; s < nseg; ++s, ++k) {
      SegSpec sp;
      sp.unit = u;
      sp.numel = 64 + static_cast<std::uint64_t>(u01(kSeed, 3, k) * 1500.0);
      sp.dtype = u01(kSeed, 4, k) < 0.5 ? gnmr::DType::kBF16 : gnmr::DType::kF32;
      // Uneven cuts: random weights, and now and then a rank with nothing.
      std::vector<double> w(static_cast<std::size_t>(ranks));
      double tot = 0.0;
      for (int r = 0; r < ranks; ++r) {
        w[static_cast<std::size_t>(r)] = u01(kSeed, 5, k, static_cast<std::uint64_t>(r)) < 0.1
                                             ? 0.0
                                             : 0.2 + u01(kSeed, 6, k, static_cast<std::uint64_t>(r));
        tot += w[static_cast<std::size_t>(r)];
      }
      if (tot == 0.0) w[0] = tot = 1.0;
      sp.cuts.push_back(0);
      double acc = 0.0;
      for (int r = 0; r < ranks; ++r) {
        acc += w[static_cast<std::size_t>(r)];
        sp.cuts.push_back(r + 1 == ranks ? sp.numel
                                         : static_cast<std::uint64_t>(acc / tot * static_cast<double>(sp.numel)));
      }
      L.segs.push_back(sp);
    }
  }
  return L;
}

// The trace: per-unit jitter, isolated spikes, three contention steps
// (8 units at once against max_o = 4) and poisoned elements in ONE rank's
// shard (the last rank holding a piece of the unit's first segment).
struct Poison {
  int step;
  std::uint32_t unit;
  bool inf;
};
const Poison kPoison[] = {{40, 3, false}, {41, 3, false},  {120, 17, false}, {160, 8, true},
                          {200, 0, false}, {201, 11, false}, {202, 23, true}};

inline double amplitude(const Layout& L, int t, std::uint32_t u) {
  double m = 1.0 + 0.05 * (2.0 * u01(kSeed, 7, static_cast<std::uint64_t>(t), u) - 1.0);
  if (t == 60 || t == 140 || t == 220) {
    const std::uint32_t first = static_cast<std::uint32_t>(t) % kUnits;
    const std::uint32_t k = (u + kUnits - first) % kUnits;
    if (k < 8) m *= 6.0 + 3.0 * k;  // distinct factors: a clear ranking
  } else if (t >= 15 && u01(kSeed, 8, static_cast<std::uint64_t>(t), u) < 0.02) {
    m *= 5.0 + 30.0 * u01(kSeed, 9, static_cast<std::uint64_t>(t), u);
  }
  return L.base[u] * m;
}

// Full gradient buffers of step t (raw bytes per segment). Every rank builds
// them and reads only its own pieces; the data a rank reads is therefore
// exactly the unsharded gradient's bits.
inline std::vector<std::vector<std::uint8_t>> make_grads(const Layout& L, int t) {
  std::vector<std::vector<std::uint8_t>> g(L.segs.size());
  for (std::size_t k = 0; k < L.segs.size(); ++k) {
    const SegSpec& s = L.segs[k];
    const double a = amplitude(L, t, s.unit);
    const bool bf = s.dtype == gnmr::DType::kBF16;
    g[k].resize(s.numel * (bf ? 2 : 4));
    for (std::uint64_t i = 0; i < s.numel; ++i) {
      const float v = static_cast<float>(a * (2.0 * u01(kSeed, 10 + static_cast<std::uint64_t>(t), k, i) - 1.0));
      if (bf) {
        const std::uint16_t h = gnmr::float_to_bf16(v);
        std::memcpy(&g[k][i * 2], &h, 2);
      } else {
        std::memcpy(&g[k][i * 4], &v, 4);
      }
    }
  }
  for (const Poison& p : kPoison) {
    if (p.step != t) continue;
    for (std::size_t k = 0; k < L.segs.size(); ++k) {
      const SegSpec& s = L.segs[k];
      if (s.unit != p.unit) continue;
      int r = static_cast<int>(s.cuts.size()) - 2;
      while (r > 0 && s.cuts[static_cast<std::size_t>(r)] == s.cuts[static_cast<std::size_t>(r) + 1]) --r;
      const std::uint64_t i = (s.cuts[static_cast<std::size_t>(r)] + s.cuts[static_cast<std::size_t>(r) + 1]) / 2;
      const float bad = p.inf ? gnmr::inf_f() : gnmr::nan_f();
      if (s.dtype == gnmr::DType::kBF16) {
        const std::uint16_t h = gnmr::float_to_bf16(bad);
        std::memcpy(&g[k][i * 2], &h, 2);
      } else {
        std::memcpy(&g[k][i * 4], &bad, 4);
      }
      break;
    }
  }
  return g;
}

// Rank r's segments (rank = -1: the whole, unsharded gradient). A rank that
// holds nothing of a unit has no segment for it; host_unit_partials with
// Coverage::kShard then gives that unit the identity (0).
inline std::vector<gnmr::Segment> segments_of(const Layout& L, const std::vector<std::vector<std::uint8_t>>& g,
                                       int r) {
  std::vector<gnmr::Segment> out;
  for (std::size_t k = 0; k < L.segs.size(); ++k) {
    const SegSpec& s = L.segs[k];
    const std::uint64_t lo = r < 0 ? 0 : s.cuts[static_cast<std::size_t>(r)];
    const std::uint64_t hi = r < 0 ? s.numel : s.cuts[static_cast<std::size_t>(r) + 1];
    if (hi == lo) continue;
    const std::size_t esz = s.dtype == gnmr::DType::kBF16 ? 2 : 4;
    out.push_back({g[k].data() + lo * esz, hi - lo, s.dtype, s.unit});
  }
  return out;
}

// ---- Records: what must be identical, serialised field by field (no padding).
template <class T>
void put(std::vector<std::uint8_t>& b, const T& v) {
  const auto* p = reinterpret_cast<const std::uint8_t*>(&v);
  b.insert(b.end(), p, p + sizeof v);
}
template <class C>
void record_step(std::vector<std::uint8_t>& b, const C& c) {
  for (const gnmr::UnitDecision& d : c.decisions()) {
    put(b, d.scale);
    put(b, d.flags);
  }
  const gnmr::StepSummary& s = c.summary();
  put(b, s.step);
  put(b, s.triggered);
  put(b, s.granted);
  put(b, s.in_recovery);
  put(b, s.denied);
  put(b, s.nonfinite);
  put(b, s.released);
  put(b, s.max_ratio);
  put(b, s.max_ratio_unit);
  put(b, s.skip_step);
}

}  // namespace mpitest
