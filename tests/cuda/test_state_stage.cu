// GPU test: gnmr::cuda::StateStage (gnmr/cuda/state_stage.cuh), the
// stream-ordered load and save of a device controller's state through a
// blob in device memory (what gnmr_jax's CUDA handler runs every step).
// Against the host controller of the same preset: after every
// load-step-save the device blob is the host's save() bit for bit and the
// decisions are the host's; a training loop takes the fast path (no
// decode); a restored older blob is decoded and the run goes on as a host
// controller loaded from it; a corrupted blob sets the status word, changes
// neither the controller nor the blob, and reports load_state's message.
// The typed, the generic layered and the fused layered (default) kinds;
// then many calls queued ahead of the device on two streams.
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gnmr/cuda/dyn_controller.cuh"
#include "gnmr/cuda/state_stage.cuh"
#include "gnmr/host/dyn_controller.hpp"
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
  auto host = make_host(name, n);
  auto dev = make_dev(name, n);
  gnmr::cuda::StateStage stage(*dev);
  const std::size_t bytes = stage.blob_bytes();
  EXPECT(bytes == host->state_bytes(), "%s: blob size %zu vs host %zu", name.c_str(), bytes, host->state_bytes());
  Dev<std::uint8_t> blob(bytes);
  Dev<float> d_in(n);
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  // Uploads on the test's stream, waited for: Dev::upload's pageable
  // cudaMemcpy is ordered only against the legacy stream.
  const auto put = [&](const std::vector<std::uint8_t>& b) {
    CK_RET(cudaMemcpyAsync(blob.p, b.data(), b.size(), cudaMemcpyHostToDevice, s));
    CK_RET(cudaStreamSynchronize(s));
    return true;
  };
  if (!put(host->save())) return;
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
  restored = make_host(name, n);
  restored->load(kept);
  if (!put(kept)) return;
  // Steps [from, to] through the stage against `restored` on the host.
  const auto follow = [&](int from, int to) -> bool {
    for (int t = from; t <= to; ++t) {
      if (!one(t)) return false;
      restored->step(in.data(), n);
      bad += blob.download() != restored->save();
    }
    return true;
  };
  if (!follow(steps / 3 + 1, steps / 3 + 20)) return;
  EXPECT(bad == 0, "%s: %zu differences after a restore", name.c_str(), bad);
  // A corrupted blob: nothing changes, the status says so, the message is load_state's.
  std::vector<std::uint8_t> good = blob.download(), corrupt = good;
  corrupt[corrupt.size() / 2] ^= 0x08u;
  if (!put(corrupt)) return;
  if (!one(999)) return;
  std::uint32_t status = 0;
  CK(cudaMemcpy(&status, stage.status_device(), 4, cudaMemcpyDefault));  // mapped host memory
  EXPECT(status == gnmr::StageCore::kFailed, "%s: status %u after a corrupted blob", name.c_str(), status);
  EXPECT(blob.download() == corrupt, "%s: a refused blob was overwritten", name.c_str());
  const std::string e = stage.take_error();
  EXPECT(e.find("checksum") != std::string::npos || e.find("corrupted") != std::string::npos,
         "%s: message '%s'", name.c_str(), e.c_str());
  if (!put(good)) return;
  if (!follow(steps / 3 + 21, steps / 3 + 30)) return;
  EXPECT(bad == 0, "%s: %zu differences after a refused blob", name.c_str(), bad);
  CK(cudaStreamDestroy(s));
  std::printf("  stage %-22s %zu units, %d steps: blob == host save() every step\n", name.c_str(), n, steps);
}

// The JAX case: many load-step-save calls queued ahead of the device, the
// blob read from one buffer and written to the next (a ring), the calls
// alternating between two streams; one synchronisation at the end, then
// every buffer against the host's save() of its step.
void stage_pipelined(const std::string& name, std::size_t n, int steps) {
  auto host = make_host(name, n);
  auto dev = make_dev(name, n);
  gnmr::cuda::StateStage stage(*dev);
  const std::size_t bytes = stage.blob_bytes();
  cudaStream_t st[2];
  CK(cudaStreamCreateWithFlags(&st[0], cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&st[1], cudaStreamNonBlocking));
  std::vector<std::unique_ptr<Dev<std::uint8_t>>> ring;
  std::vector<std::unique_ptr<Dev<float>>> ins;
  for (int t = 0; t <= steps; ++t) ring.emplace_back(new Dev<std::uint8_t>(bytes));
  for (int t = 0; t < steps; ++t) ins.emplace_back(new Dev<float>(n));
  const std::vector<std::uint8_t> first = host->save();
  CK(cudaMemcpy(ring[0]->p, first.data(), bytes, cudaMemcpyHostToDevice));
  std::vector<std::vector<float>> in(steps, std::vector<float>(n));
  for (int t = 0; t < steps; ++t) {
    tracegen::preset_partials(t + 1, in[t]);
    CK(cudaMemcpy(ins[t]->p, in[t].data(), n * 4, cudaMemcpyHostToDevice));
  }
  CK(cudaDeviceSynchronize());
  for (int t = 0; t < steps; ++t) {
    cudaStream_t s = st[t % 2];
    CK(stage.load_async(ring[t]->p, bytes, s));
    CK(dev->step(ins[t]->p, s));
    CK(stage.save_async(ring[t + 1]->p, bytes, s));
  }
  CK(cudaDeviceSynchronize());
  std::size_t bad = 0;
  for (int t = 0; t < steps; ++t) {
    host->step(in[t].data(), n);
    bad += ring[t + 1]->download() != host->save();
  }
  EXPECT(bad == 0, "%s: %zu of %d queued steps differ from the host", name.c_str(), bad, steps);
  // Each load found the blob the stage had just written (the ring's next).
  EXPECT(stage.fast_loads() == static_cast<std::uint64_t>(steps), "%s: %llu fast loads of %d queued",
         name.c_str(), static_cast<unsigned long long>(stage.fast_loads()), steps);
  CK(cudaStreamDestroy(st[0]));
  CK(cudaStreamDestroy(st[1]));
  std::printf("  stage %-22s %zu units, %d queued steps on two streams: blob == host save()\n", name.c_str(), n,
              steps);
}

}  // namespace

void test_state_stage() {
  const int steps = quick() ? 60 : 150;
  stage_run("gnmr", 257, steps);
  stage_run("gnmr-calibrated", 257, steps);
  stage_run("default", 257, steps);           // fused layered
  stage_run("clip+gnmr", 64, steps);           // generic layered, global outer
  stage_pipelined("default", 257, quick() ? 40 : 100);
  stage_pipelined("gnmr", 1000, quick() ? 40 : 100);
}

}  // namespace gpu_test
