// GPU test: gnmr::cuda::StateStage (gnmr/cuda/state_stage.cuh), the
// stream-ordered load and save of a device controller's state through a
// blob in device memory (what gnmr_jax's CUDA handler runs every step).
// Against the host controller of the same preset: after every
// load-step-save the device blob is the host's save() bit for bit and the
// decisions are the host's; a training loop takes the fast path (no
// decode); a restored older blob is decoded and the run goes on as a host
// controller loaded from it; a corrupted blob sets the status word, changes
// neither the controller nor the blob, and reports load_state's message.
// The typed, the generic layered and the fused layered (default) kinds.
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gnmr/cuda/presets.cuh"
#include "gnmr/cuda/state_stage.cuh"
#include "gnmr/presets/make.hpp"
#include "harness.cuh"
#include "../support/trace_gen.hpp"

namespace gpu_test {
namespace {

// CK inside a lambda that returns whether to go on.
#define CK_RET(call)                                                                                      \
  do {                                                                                                    \
    const cudaError_t ck_e_ = (call);                                                                     \
    if (ck_e_ != cudaSuccess) {                                                                           \
      ++gpu_test::failures();                                                                             \
      std::printf("  FAILED %s:%d: %s -> %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(ck_e_));    \
      return false;                                                                                       \
    }                                                                                                     \
  } while (0)

void stage_run(const std::string& name, std::size_t n, int steps) {
  auto host = gnmr::presets::make(name, n);
  auto dev = gnmr::cuda::make_device(name, n);
  gnmr::cuda::StateStage stage(*dev);
  const std::size_t bytes = stage.blob_bytes();
  EXPECT(bytes == host->state_bytes(), "%s: blob size %zu vs host %zu", name.c_str(), bytes, host->state_bytes());
  Dev<std::uint8_t> blob(bytes);
  Dev<float> d_in(n);
  blob.upload(host->save());
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::vector<float> in(n);
  std::vector<std::uint8_t> kept;
  std::unique_ptr<gnmr::DynController> restored;
  std::size_t bad = 0;
  const auto one = [&](int t) -> bool {
    tracegen::preset_partials(t, in);
    CK_RET(cudaMemcpyAsync(d_in.p, in.data(), n * 4, cudaMemcpyHostToDevice, s));
    CK_RET(stage.load_async(blob.p, bytes, s));
    CK_RET(dev->step(d_in.p, s));
    CK_RET(stage.save_async(blob.p, bytes, s));
    CK_RET(cudaStreamSynchronize(s));
    return true;
  };
  for (int t = 1; t <= steps; ++t) {
    if (!one(t)) return;
    host->step(in.data(), n);
    const std::vector<std::uint8_t> got = blob.download();
    bad += got != host->save();
    const auto dd = dev->copy_decisions();
    for (std::size_t u = 0; u < n; ++u)
      bad += dd[u].flags != host->decisions()[u].flags || !same_bits(dd[u].scale, host->decisions()[u].scale);
    if (t == steps / 3) kept = got;
  }
  EXPECT(bad == 0, "%s: %zu differences from the host over %d steps", name.c_str(), bad, steps);
  EXPECT(stage.fast_loads() == static_cast<std::uint64_t>(steps), "%s: %llu fast loads of %d", name.c_str(),
         static_cast<unsigned long long>(stage.fast_loads()), steps);
  // A restore: step steps/3's blob, then as a host controller loaded from it.
  restored = gnmr::presets::make(name, n);
  restored->load(kept);
  blob.upload(kept);
  for (int t = steps / 3 + 1; t <= steps / 3 + 20; ++t) {
    if (!one(t)) return;
    restored->step(in.data(), n);
    bad += blob.download() != restored->save();
  }
  EXPECT(bad == 0, "%s: %zu differences after a restore", name.c_str(), bad);
  // A corrupted blob: nothing changes, the status says so, the message is load_state's.
  std::vector<std::uint8_t> good = blob.download(), corrupt = good;
  corrupt[corrupt.size() / 2] ^= 0x08u;
  blob.upload(corrupt);
  if (!one(999)) return;
  std::uint32_t status = 0;
  CK(cudaMemcpy(&status, stage.status_device(), 4, cudaMemcpyDeviceToHost));
  EXPECT(status == gnmr::StageCore::kFailed, "%s: status %u after a corrupted blob", name.c_str(), status);
  EXPECT(blob.download() == corrupt, "%s: a refused blob was overwritten", name.c_str());
  const std::string e = stage.take_error();
  EXPECT(e.find("checksum") != std::string::npos || e.find("corrupted") != std::string::npos,
         "%s: message '%s'", name.c_str(), e.c_str());
  blob.upload(good);
  for (int t = steps / 3 + 21; t <= steps / 3 + 30; ++t) {
    if (!one(t)) return;
    restored->step(in.data(), n);
    bad += blob.download() != restored->save();
  }
  EXPECT(bad == 0, "%s: %zu differences after a refused blob", name.c_str(), bad);
  CK(cudaStreamDestroy(s));
  std::printf("  stage %-22s %zu units, %d steps: blob == host save() every step\n", name.c_str(), n, steps);
}

}  // namespace

void test_state_stage() {
  const int steps = quick() ? 60 : 150;
  stage_run("gnmr", 257, steps);
  stage_run("gnmr-calibrated", 257, steps);
  stage_run("default", 257, steps);           // fused layered
  stage_run("clip+gnmr", 64, steps);           // generic layered, global outer
}

}  // namespace gpu_test
