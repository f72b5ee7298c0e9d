// examples/checkpoint_resume.cpp — checkpoint and resume the recommended
// controller (gnmr::make_default) with save() / load(), so that a restarted
// run decides exactly as if it had never stopped.
//
// Twelve units over 200 steps of a recorded-looking trace (deterministic
// norms with spikes, a NaN, a burst). The controller is the preset
// "default": the stabilizer on every unit with GNMR's calibrated trigger
// inside it. Three runs:
//   1. straight through, steps 1..200;
//   2. steps 1..120, then ctl->save() written to a file next to the model's
//      checkpoint; step 120 is inside a lock, so the blob must carry it
//      (unit 7 is granted at step 115 and promoted for steps 116..123);
//   3. a fresh gnmr::make_default(12) in a "new process": load() from that
//      file, then steps 121..200.
// Run 3's decisions must equal run 1's bit for bit (the program exits
// non-zero otherwise); a cold restart without the blob is shown to differ.
// Then the failure modes: a corrupted byte, a truncated file and another
// preset's blob (stabilizer+gnmr-promote, the pair the default replaced)
// are each refused with gnmr::StateError, whose message says what is
// wrong, and the controller is left as it was.
//
// What the blob holds: both rules' state — the stabilizer's running moments
// of every unit's norm, and GNMR's per-unit mean, calibration statistics
// (the learned thresholds), trigger history and lock — and the step count,
// each part versioned and checksummed; not the model, the optimizer or the
// data position, which the training framework checkpoints as usual. Here
// the norms are a function of the step, so the controller's state is all
// there is to resume. The same calls work on every controller kind
// (gnmr::save_state / gnmr::load_state are their free forms).
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "gnmr/gnmr.hpp"

namespace {

constexpr std::uint32_t kUnits = 12;
constexpr int kSteps = 200, kCheckpoint = 120;

// The norm of unit u at step t: a slowly decaying level with noise, spikes
// that make the controller act (unit 3 at step 40; unit 7 at step 115, so
// that step 120 is inside its lock, and again at 130), a NaN at step 60 and
// a burst of five units at step 150 (a model-wide jump: the default holds
// that step, grants nothing and clips all five). The first spike comes
// after the 20 steps in which every unit calibrates its thresholds.
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

void step(gnmr::DynController& c, int t) {
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
bool refused(gnmr::DynController& c, const std::vector<std::uint8_t>& blob, const char* what) {
  const std::vector<std::uint8_t> before = c.save();
  try {
    c.load(blob);
  } catch (const gnmr::StateError& e) {
    std::printf("%-30s -> gnmr::StateError: %s\n", what, e.what());
    return c.save() == before;
  }
  std::printf("%-30s -> loaded (FAILED: it should have been refused)\n", what);
  return false;
}

}  // namespace

int main() {
  int bad = 0;
  const auto expect = [&bad](bool ok, const char* what) {
    if (!ok) std::printf("CHECK FAILED: %s\n", what), ++bad;
  };

  // 1. Straight through.
  std::unique_ptr<gnmr::DynController> straight = gnmr::make_default(kUnits);
  std::vector<std::vector<gnmr::UnitDecision>> want;
  for (int t = 1; t <= kSteps; ++t) {
    step(*straight, t);
    want.push_back(straight->decisions());
  }
  // What the comparison below relies on: the spikes were acted on, and the
  // lock of step 115's grant runs past the checkpoint.
  expect((want[115 - 1][7].flags & gnmr::kGranted) != 0, "unit 7's spike at step 115 is granted");
  expect((want[kCheckpoint][7].flags & gnmr::kPromote) != 0, "unit 7 is still promoted after the checkpoint");
  expect((want[40 - 1][3].flags & gnmr::kGranted) && (want[130 - 1][7].flags & gnmr::kGranted),
         "the spikes at steps 40 and 130 are granted");
  expect((want[60 - 1][9].flags & gnmr::kSkip) != 0, "the NaN at step 60 is skipped");
  int burst = 0;
  for (std::uint32_t u = 2; u <= 6; ++u)
    burst += (want[150 - 1][u].flags & (gnmr::kTriggered | gnmr::kSystemic)) == (gnmr::kTriggered | gnmr::kSystemic);
  expect(burst == 5, "the burst at step 150 is held: all five units triggered and bounded, none granted");

  // 2. Up to the checkpoint, then the blob goes to disk.
  const std::string path = "checkpoint_resume.gnmrstate";
  {
    auto first = gnmr::make_default(kUnits);
    for (int t = 1; t <= kCheckpoint; ++t) step(*first, t);
    int locked = 0;
    for (const gnmr::UnitReport& r : first->reports()) locked += r.lock_left > 0;
    std::printf("checkpoint at step %d: %d unit(s) in recovery (unit 7 promoted, %d lock steps left)\n",
                kCheckpoint, locked, first->reports()[7].lock_left);
    expect(locked > 0 && first->reports()[7].lock_left > 0, "the checkpoint falls inside unit 7's lock");
    const std::vector<std::uint8_t> blob = first->save();
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(blob.data()),
                                                static_cast<std::streamsize>(blob.size()));
    std::printf("saved %zu bytes to %s (\"%s\": the stabilizer's and GNMR's states, each checksummed)\n",
                blob.size(), path.c_str(), first->name().c_str());
  }

  // 3. A fresh controller resumes from the file.
  const std::vector<std::uint8_t> blob = read_file(path);
  auto resumed = gnmr::make_default(kUnits);
  resumed->load(blob);
  expect(resumed->steps_done() == kCheckpoint, "the step count comes back");
  auto cold = gnmr::make_default(kUnits);  // a restart that forgot the blob
  int differ = 0, cold_differ = 0;
  for (int t = kCheckpoint + 1; t <= kSteps; ++t) {
    step(*resumed, t);
    step(*cold, t);
    differ += !same(resumed->decisions(), want[t - 1]);
    cold_differ += !same(cold->decisions(), want[t - 1]);
  }
  std::printf("resumed run, steps %d..%d: %d of %d steps differ from the uninterrupted run\n", kCheckpoint + 1,
              kSteps, differ, kSteps - kCheckpoint);
  std::printf("cold restart without the blob: %d of %d steps differ (moments, means, learned thresholds and "
              "locks lost)\n",
              cold_differ, kSteps - kCheckpoint);
  expect(differ == 0, "the resumed run decides exactly as the uninterrupted one");
  expect(cold_differ > 0, "without the blob the decisions change (so the comparison above can fail)");

  // The failure modes: each refused with a message, nothing changed.
  std::printf("\n");
  std::vector<std::uint8_t> corrupt = blob;
  corrupt[corrupt.size() - 20] ^= 0x01u;  // one bit of the last unit's state (the last 8 bytes are the checksum)
  expect(refused(*resumed, corrupt, "one flipped bit"), "a corrupted blob is refused and changes nothing");
  expect(refused(*resumed, std::vector<std::uint8_t>(blob.begin(), blob.end() - 10), "truncated file"),
         "a truncated blob is refused and changes nothing");
  auto other = gnmr::presets::make("stabilizer+gnmr-promote", kUnits);
  expect(refused(*resumed, other->save(), "a stabilizer+gnmr-promote blob"), "another preset's blob is refused");
  std::remove(path.c_str());

  std::printf(bad ? "checkpoint_resume: %d check(s) FAILED\n" : "checkpoint_resume: all checks passed\n", bad);
  return bad ? 1 : 0;
}
