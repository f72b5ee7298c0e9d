// fuzz/make_seeds.cpp — writes the fuzz_state_blob seed corpus.
//
// Valid blobs are what the fuzzer cannot find on its own (a checksum guards
// them), so the seeds are real save_state() output of warmed-up controllers,
// one per mode of fuzz_state_blob.cpp, plus version-1 blobs of the same
// states (the pre-v2 layout, written here: tests/unit/test_state_v2.cpp holds
// genuine ones). Run it to refresh the checked-in seeds after the blob
// format or a policy's State changes:
//   gnmr_fuzz_make_seeds fuzz/corpus/fuzz_state_blob
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "gnmr/detail/fnv.hpp"
#include "gnmr/host/controller.hpp"
#include "gnmr/io/state.hpp"
#include "gnmr/policy/recovery_ladder.hpp"

namespace {

template <class C>
C warmed(gnmr::ControllerOptions opt = {}) {
  C c(4, {}, {}, {}, {}, {}, opt);
  for (int t = 1; t <= 24; ++t) {
    float x[4] = {1.0f, 2.0f, 0.5f, 4.0f};
    if (t == 18) x[1] = 40.0f;
    if (t == 20) x[0] = x[2] = x[3] = 30.0f;  // a systemic step under share 0.25
    c.step_norms(x, 4);
  }
  return c;
}
template <class C>
std::vector<std::uint8_t> warmed_blob(gnmr::ControllerOptions opt = {}) {
  return gnmr::save_state(warmed<C>(opt));
}

// The version-1 layout: 56-byte header, the version-1 fingerprint, the units.
template <class C>
std::vector<std::uint8_t> v1_blob(const C& c) {
  using US = typename C::UnitState;
  const std::size_t payload = c.num_units() * sizeof(US);
  std::vector<std::uint8_t> b(56 + payload + 8);
  const auto put = [&b](std::size_t at, std::uint64_t v, int n) {
    for (int i = 0; i < n; ++i) b[at + static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(v >> (8 * i));
  };
  std::memcpy(b.data(), "GNMRSTAT", 8);
  put(8, 1, 4);
  put(12, 56, 4);
  put(16, c.num_units(), 8);
  put(24, gnmr::policy_fingerprint_v1<typename C::Policies>(), 8);
  put(32, sizeof(US), 8);
  put(40, static_cast<std::uint64_t>(c.steps_done()), 8);
  put(48, payload, 8);
  std::memcpy(b.data() + 56, c.unit_states().data(), payload);
  put(56 + payload, gnmr::detail::fnv1a64(b.data(), 56 + payload), 8);
  return b;
}

bool write(const std::string& path, std::uint8_t mode, const std::vector<std::uint8_t>& body) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return false;
  const bool ok = std::fwrite(&mode, 1, 1, f) == 1 && std::fwrite(body.data(), 1, body.size(), f) == body.size();
  return std::fclose(f) == 0 && ok;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTPUT_DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  using Ladder = gnmr::GnmrController<gnmr::L2Norm, gnmr::EmaMean, gnmr::GnmrTrigger, gnmr::Ladder, gnmr::MaxO>;
  const auto gnmr_blob = warmed_blob<gnmr::GnmrController<>>();
  const auto ladder_blob = warmed_blob<Ladder>();
  gnmr::ControllerOptions sys;
  sys.systemic.action = gnmr::SystemicAction::kGlobalClip;
  sys.systemic.share = 0.25;
  const auto global_blob = warmed_blob<gnmr::GnmrController<>>(sys);
  const auto v1_gnmr = v1_blob(warmed<gnmr::GnmrController<>>());
  bool ok = write(dir + "/valid_gnmr.bin", 0, gnmr_blob) &&
            write(dir + "/valid_ladder.bin", 2, ladder_blob) &&
            write(dir + "/valid_global_clip.bin", 4, global_blob) &&
            // Version 1: refused (GNMR's Delta window is not recorded), then loaded on trust.
            write(dir + "/v1_gnmr.bin", 0, v1_gnmr) && write(dir + "/v1_gnmr_trusted.bin", 8, v1_gnmr) &&
            write(dir + "/v1_ladder_trusted.bin", 10, v1_blob(warmed<Ladder>())) &&
            // Mismatches: the ladder's blob into the default controller and back.
            write(dir + "/ladder_into_gnmr.bin", 0, ladder_blob) &&
            write(dir + "/gnmr_into_ladder.bin", 2, gnmr_blob);
  const gnmr::StateInfo info = gnmr::read_state_info(gnmr_blob.data(), gnmr_blob.size());
  const gnmr::StateInfo gsys = gnmr::read_state_info(global_blob.data(), global_blob.size());
  // Patch mode's payload: a 2-byte little-endian offset, then the XOR bytes.
  const auto patch_at = [](std::size_t off, std::vector<std::uint8_t> x) {
    x.insert(x.begin(), {static_cast<std::uint8_t>(off & 0xff), static_cast<std::uint8_t>(off >> 8)});
    return x;
  };
  // Truncated, and one flipped payload bit (checksum now wrong).
  std::vector<std::uint8_t> cut(gnmr_blob.begin(), gnmr_blob.begin() + gnmr_blob.size() / 2);
  std::vector<std::uint8_t> flip = gnmr_blob;
  flip[info.payload_offset + 3] ^= 0x10;
  ok = ok && write(dir + "/truncated.bin", 0, cut) && write(dir + "/bitflip.bin", 0, flip);
  // Patch mode: offset 16 (the unit count), XOR 1 -> 5 units; offset 40 (steps done).
  ok = ok && write(dir + "/patch_units.bin", 1, {16, 0, 1}) &&
       write(dir + "/patch_steps.bin", 1, {40, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}) &&
       write(dir + "/patch_payload.bin", 1, patch_at(info.payload_offset + 4, {0xff, 0x7f, 0x80, 0x00})) &&
       // The identity (a policy mismatch with a readable message) and the global state.
       write(dir + "/patch_identity.bin", 1, patch_at(gnmr::kStateHeaderBytes + 3, {0x01})) &&
       write(dir + "/patch_global.bin", 5, patch_at(gsys.global_offset, {0x00, 0x00, 0xc0, 0x7f}));
  if (!ok) {
    std::fprintf(stderr, "cannot write the seeds into %s\n", dir.c_str());
    return 1;
  }
  return 0;
}
