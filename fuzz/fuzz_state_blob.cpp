// fuzz/fuzz_state_blob.cpp — libFuzzer target for gnmr::load_state (state.hpp).
//
// The first input byte picks the mode, the rest is the payload:
//   bit 0 = 0  the payload is the blob, as is (magic, sizes, checksum ...);
//   bit 0 = 1  the payload is XORed into a valid blob at an offset given by
//              its first two bytes and the checksum is recomputed, so the
//              checks behind the checksum (units, fingerprint, sizes, step
//              count) and the loaded state itself are exercised too;
//   bit 1      load into a gnmr-ladder controller instead of the default;
//   bit 2      with the systemic rule on (global-clip: the blob's global
//              state, the tracker of the total norm, is used);
//   bit 3      load with StateLoadOptions::trust_v1 (version-1 blobs of
//              these policy types then load).
// Properties: load_state either succeeds or throws gnmr::StateError, and on
// an error the controller is unchanged (its saved blob is identical). A
// loaded blob saves back in its canonical form (a version-1 one as version
// 2) with the same header and payload size, and that form is a fixed point.
// After a successful load the controller must run steps (clean or faulty
// norms) without crashing or tripping ASan/UBSan, and no decision scale may
// be NaN — whatever floats the blob held.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "gnmr/detail/canonical.hpp"
#include "gnmr/detail/fnv.hpp"
#include "gnmr/host/controller.hpp"
#include "gnmr/io/state.hpp"
#include "gnmr/policy/recovery_ladder.hpp"

namespace {

constexpr std::size_t kUnits = 4;

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz_state_blob: invariant violated: %s\n", what);
    std::abort();
  }
}

template <class C>
void warm(C& c) {
  const float n[kUnits] = {1.0f, 2.0f, 0.5f, 4.0f};
  for (int t = 1; t <= 24; ++t) {
    float x[kUnits];
    for (std::size_t i = 0; i < kUnits; ++i) x[i] = t == 18 && i == 1 ? 40.0f : n[i];
    c.step_norms(x, kUnits);
  }
}

// Which bytes of a unit state hold no value (padding between the policies'
// states, an empty state's byte): those canonical_copy writes as zero. An
// object of all-ones bytes, copied canonically into zeros, keeps its ones
// exactly where its values are.
template <class C>
std::vector<bool> padding_of_unit_state() {
  using S = typename C::UnitState;
  S s;
  std::memset(static_cast<void*>(&s), 0xff, sizeof(S));
  std::vector<unsigned char> out(sizeof(S), 0);
  gnmr::detail::canonical_copy(s, out.data());
  std::vector<bool> pad(sizeof(S));
  for (std::size_t i = 0; i < sizeof(S); ++i) pad[i] = out[i] == 0;
  return pad;
}

template <class C>
void run(const std::uint8_t* data, std::size_t size, bool patch, bool systemic, bool trust) {
  gnmr::ControllerOptions opt;
  if (systemic) {
    opt.systemic.action = gnmr::SystemicAction::kGlobalClip;
    opt.systemic.share = 0.25;
  }
  C c(kUnits, {}, {}, {}, {}, {}, opt);
  warm(c);
  const std::vector<std::uint8_t> before = gnmr::save_state(c);
  std::vector<std::uint8_t> blob;
  if (!patch) {
    blob.assign(data, data + size);
  } else {
    blob = before;
    if (size >= 2) {
      const std::size_t body = blob.size() - gnmr::kStateChecksumBytes;
      const std::size_t off = (static_cast<std::size_t>(data[0]) | (static_cast<std::size_t>(data[1]) << 8)) % body;
      for (std::size_t i = 2; i < size && off + i - 2 < body; ++i) blob[off + i - 2] ^= data[i];
      const std::uint64_t h = gnmr::detail::fnv1a64(blob.data(), body);
      for (int b = 0; b < 8; ++b) blob[body + b] = static_cast<std::uint8_t>(h >> (8 * b));
    }
  }
  gnmr::StateLoadOptions lo;
  lo.trust_v1 = trust;
  try {
    gnmr::load_state(c, blob.data(), blob.size(), lo);
  } catch (const gnmr::StateError&) {
    check(gnmr::save_state(c) == before, "a failed load changed the controller");
    return;
  }
  // Blobs are written canonically (padding and empty states zeroed), so a
  // loaded blob saves back as its canonical form: the same header and sizes,
  // the payload equal except at the layout's padding bytes, which are zero,
  // and a fixed point — loading the saved blob and saving again gives its
  // bytes. A value byte that comes back zeroed (or changed) is a loss.
  const std::vector<std::uint8_t> again = gnmr::save_state(c);
  const gnmr::StateInfo in = gnmr::read_state_info(blob.data(), blob.size());
  const gnmr::StateInfo out = gnmr::read_state_info(again.data(), again.size());
  check(out.version == gnmr::kStateFormatVersion && out.payload_bytes == in.payload_bytes,
        "a loaded blob does not save back with its units");
  static const std::vector<bool> pad = padding_of_unit_state<C>();
  const std::size_t unit_bytes = sizeof(typename C::UnitState);
  for (std::uint64_t i = 0; i < in.payload_bytes; ++i) {
    const std::uint8_t a = again[static_cast<std::size_t>(out.payload_offset + i)];
    const std::uint8_t b = blob[static_cast<std::size_t>(in.payload_offset + i)];
    const bool is_pad = i < kUnits * unit_bytes && pad[static_cast<std::size_t>(i % unit_bytes)];
    check(is_pad ? a == 0 : a == b, is_pad ? "a padding byte of the layout saved back non-zero"
                                           : "a value byte of the payload saved back changed");
  }
  if (in.version == gnmr::kStateFormatVersion)
    check(again.size() == blob.size() && std::memcmp(again.data(), blob.data(), static_cast<std::size_t>(in.payload_offset)) == 0,
          "a loaded blob does not save back with its header");
  {
    C d(kUnits, {}, {}, {}, {}, {}, opt);
    gnmr::load_state(d, again.data(), again.size());
    check(gnmr::save_state(d) == again, "a saved blob is not a fixed point of load and save");
  }
  const float inf = gnmr::inf_f(), nan = gnmr::nan_f();
  const float rows[4][kUnits] = {{1.0f, 2.0f, 0.5f, 4.0f},
                                 {1e30f, 0.0f, nan, 3.4e38f},
                                 {inf, -inf, 1e-30f, 2.0f},
                                 {1.0f, 2.0f, 0.5f, 4.0f}};
  for (int t = 0; t < 12; ++t) {
    const gnmr::StepSummary& s = c.step_norms(rows[t % 4], kUnits);
    check(s.in_recovery <= static_cast<std::uint32_t>(c.policies().budget.max_o), "in_recovery > maxO");
    for (const gnmr::UnitDecision& d : c.decisions()) {
      check(!(d.flags & gnmr::kSkip) || d.scale == 0.0f, "skip with a non-zero scale");
      check(!gnmr::is_nan(d.scale), "a NaN scale");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::uint8_t mode = data[0];
  const bool patch = mode & 1, systemic = mode & 4, trust = mode & 8;
  if (mode & 2)
    run<gnmr::GnmrController<gnmr::L2Norm, gnmr::EmaMean, gnmr::GnmrTrigger, gnmr::Ladder, gnmr::MaxO>>(
        data + 1, size - 1, patch, systemic, trust);
  else
    run<gnmr::GnmrController<>>(data + 1, size - 1, patch, systemic, trust);
  return 0;
}
