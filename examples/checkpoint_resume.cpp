// examples/checkpoint_resume.cpp — checkpoint and resume a controller with
// its state blob (gnmr/io/state.hpp), so that a restarted run decides exactly
// as if it had never stopped.
//
// Twelve units over 200 steps of a recorded-looking trace (deterministic
// norms with spikes, a NaN, a burst). The controller is the gnmr-promote
// preset by its typed alias. Three runs:
//   1. straight through, steps 1..200;
//   2. steps 1..120, then gnmr::save_state() written to a file next to the
//      model's checkpoint; step 120 is inside a lock, so the blob must carry
//      it (a unit promoted for steps 116..123);
//   3. a fresh controller in a "new process": gnmr::load_state() from that
//      file, then steps 121..200.
// Run 3's decisions must equal run 1's bit for bit (the program exits
// non-zero otherwise); a cold restart without the blob is shown to differ.
// Then the failure modes: a corrupted byte, a truncated file and another
// preset's blob are each refused with gnmr::StateError, whose message says
// what is wrong, and the controller is left as it was.
//
// What the blob holds: every unit's mean, trigger history and lock, and the
// step count; not the model, the optimizer or the data position, which the
// training framework checkpoints as usual. Here the norms are a function of
// the step, so the controller's state is all there is to resume.
//
// Expected output: docs/record/examples.md, "checkpoint_resume".
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "gnmr/gnmr.hpp"

namespace {

constexpr std::uint32_t kUnits = 12;
constexpr int kSteps = 200, kCheckpoint = 120;

using Controller = gnmr::presets::GnmrPromote;

// The norm of unit u at step t: a slowly decaying level with noise, spikes
// that make the controller act (one at step 115, so that step 120 is inside
// its lock), a NaN at step 60 and a burst of five units at step 150.
float norm_at(int t, std::uint32_t u) {
  std::uint32_t h = static_cast<std::uint32_t>(t) * 0x9E3779B1u ^ (u + 1u) * 0x85EBCA77u;
  h ^= h >> 15, h *= 0x2C1B3C6Du, h ^= h >> 13;
  const float noise = static_cast<float>(h >> 8) / 16777216.0f;  // [0, 1)
  float n = (1.0f + 0.1f * static_cast<float>(u)) * (0.9f + 0.2f * noise) * (1.0f - 0.001f * static_cast<float>(t));
  if ((t == 40 && u == 3) || (t == 115 && u == 7) || (t == 130 && u == 7)) n *= 12.0f;
  if (t == 150 && u >= 2 && u <= 6) n *= 8.0f;
  if (t == 60 && u == 9) n = gnmr::nan_f();
  return n;
}

void step(Controller& c, int t) {
  std::vector<float> n(kUnits);
  for (std::uint32_t u = 0; u < kUnits; ++u) n[u] = norm_at(t, u);
  c.step_norms(n);
}

std::vector<std::uint8_t> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<std::uint8_t>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

bool same(const std::vector<gnmr::UnitDecision>& a, const std::vector<gnmr::UnitDecision>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(gnmr::UnitDecision)) == 0;
}

// Tries to load a bad blob: it must throw StateError and leave c unchanged.
bool refused(Controller& c, const std::vector<std::uint8_t>& blob, const char* what) {
  const std::vector<std::uint8_t> before = gnmr::save_state(c);
  try {
    gnmr::load_state(c, blob);
  } catch (const gnmr::StateError& e) {
    std::printf("%-22s -> gnmr::StateError: %s\n", what, e.what());
    return gnmr::save_state(c) == before;
  }
  std::printf("%-22s -> loaded (FAILED: it should have been refused)\n", what);
  return false;
}

}  // namespace

int main() {
  int bad = 0;
  const auto expect = [&bad](bool ok, const char* what) {
    if (!ok) std::printf("CHECK FAILED: %s\n", what), ++bad;
  };

  // 1. Straight through.
  Controller straight = gnmr::presets::gnmr_promote(kUnits);
  std::vector<std::vector<gnmr::UnitDecision>> want;
  for (int t = 1; t <= kSteps; ++t) {
    step(straight, t);
    want.push_back(straight.decisions());
  }

  // 2. Up to the checkpoint, then the blob goes to disk.
  const std::string path = "checkpoint_resume.gnmrstate";
  {
    Controller first = gnmr::presets::gnmr_promote(kUnits);
    for (int t = 1; t <= kCheckpoint; ++t) step(first, t);
    int locked = 0;
    for (const gnmr::UnitReport& r : first.reports()) locked += r.lock_left > 0;
    std::printf("checkpoint at step %d: %d unit(s) in recovery (unit 7 promoted, %d lock steps left)\n",
                kCheckpoint, locked, first.reports()[7].lock_left);
    expect(locked > 0, "the checkpoint falls inside a lock");
    const std::vector<std::uint8_t> blob = gnmr::save_state(first);
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(blob.data()),
                                                static_cast<std::streamsize>(blob.size()));
    // What the blob declares (read_state_info checks it; no controller needed).
    const gnmr::StateInfo info = gnmr::read_state_info(blob.data(), blob.size());
    std::printf("saved %zu bytes to %s (%zu-byte header, %zu-byte policy identity \"%s\", %u-byte global "
                "state, %u units x %zu bytes, checksum)\n",
                blob.size(), path.c_str(), gnmr::kStateHeaderBytes, info.identity.size(), info.identity.c_str(),
                info.global_bytes, kUnits, sizeof(Controller::UnitState));
  }

  // 3. A fresh controller resumes from the file.
  const std::vector<std::uint8_t> blob = read_file(path);
  Controller resumed = gnmr::presets::gnmr_promote(kUnits);
  gnmr::load_state(resumed, blob);
  expect(resumed.steps_done() == kCheckpoint, "the step count comes back");
  Controller cold = gnmr::presets::gnmr_promote(kUnits);  // a restart that forgot the blob
  int differ = 0, cold_differ = 0;
  for (int t = kCheckpoint + 1; t <= kSteps; ++t) {
    step(resumed, t);
    step(cold, t);
    differ += !same(resumed.decisions(), want[t - 1]);
    cold_differ += !same(cold.decisions(), want[t - 1]);
  }
  std::printf("resumed run, steps %d..%d: %d of %d steps differ from the uninterrupted run\n", kCheckpoint + 1,
              kSteps, differ, kSteps - kCheckpoint);
  std::printf("cold restart without the blob: %d of %d steps differ (means, ratio history and locks lost)\n",
              cold_differ, kSteps - kCheckpoint);
  expect(differ == 0, "the resumed run decides exactly as the uninterrupted one");
  expect(cold_differ > 0, "without the blob the decisions change (so the comparison above can fail)");

  // The failure modes: each refused with a message, nothing changed.
  std::printf("\n");
  std::vector<std::uint8_t> corrupt = blob;
  corrupt[gnmr::kStateHeaderBytes + sizeof(Controller::UnitState) + 4] ^= 0x01u;  // one bit of unit 1's state
  expect(refused(resumed, corrupt, "one flipped bit"), "a corrupted blob is refused and changes nothing");
  expect(refused(resumed, std::vector<std::uint8_t>(blob.begin(), blob.end() - 10), "truncated file"),
         "a truncated blob is refused and changes nothing");
  gnmr::presets::GnmrClip other = gnmr::presets::gnmr_clip(kUnits);
  expect(refused(resumed, gnmr::save_state(other), "a gnmr-clip blob"), "another preset's blob is refused");
  std::remove(path.c_str());

  std::printf(bad ? "checkpoint_resume: %d check(s) FAILED\n" : "checkpoint_resume: all checks passed\n", bad);
  return bad ? 1 : 0;
}
