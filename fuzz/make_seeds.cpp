// fuzz/make_seeds.cpp — writes the fuzz_state_blob seed corpus.
//
// Valid blobs are what the fuzzer cannot find on its own (a checksum guards
// them), so the seeds are real save_state() output of warmed-up controllers,
// one per mode of fuzz_state_blob.cpp. Run it to refresh the checked-in
// seeds after the blob format or a policy's State changes:
//   gnmr_fuzz_make_seeds fuzz/corpus/fuzz_state_blob
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "gnmr/controller.hpp"
#include "gnmr/policy/ladder.hpp"
#include "gnmr/state.hpp"

namespace {

template <class C>
std::vector<std::uint8_t> warmed_blob() {
  C c(4);
  for (int t = 1; t <= 24; ++t) {
    float x[4] = {1.0f, 2.0f, 0.5f, 4.0f};
    if (t == 18) x[1] = 40.0f;
    c.step_norms(x, 4);
  }
  return gnmr::save_state(c);
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
  bool ok = write(dir + "/valid_gnmr.bin", 0, gnmr_blob) &&
            write(dir + "/valid_ladder.bin", 2, ladder_blob) &&
            // Mismatches: the ladder's blob into the default controller and back.
            write(dir + "/ladder_into_gnmr.bin", 0, ladder_blob) &&
            write(dir + "/gnmr_into_ladder.bin", 2, gnmr_blob);
  // Truncated, and one flipped payload bit (checksum now wrong).
  std::vector<std::uint8_t> cut(gnmr_blob.begin(), gnmr_blob.begin() + gnmr_blob.size() / 2);
  std::vector<std::uint8_t> flip = gnmr_blob;
  flip[gnmr::kStateHeaderBytes + 3] ^= 0x10;
  ok = ok && write(dir + "/truncated.bin", 0, cut) && write(dir + "/bitflip.bin", 0, flip);
  // Patch mode: offset 16 (the unit count), XOR 1 -> 5 units; offset 40 (steps done).
  ok = ok && write(dir + "/patch_units.bin", 1, {16, 0, 1}) &&
       write(dir + "/patch_steps.bin", 1, {40, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}) &&
       write(dir + "/patch_payload.bin", 1, {60, 0, 0xff, 0x7f, 0x80, 0x00});
  if (!ok) {
    std::fprintf(stderr, "cannot write the seeds into %s\n", dir.c_str());
    return 1;
  }
  return 0;
}
