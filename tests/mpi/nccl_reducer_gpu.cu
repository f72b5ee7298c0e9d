// tests/mpi/nccl_reducer_gpu.cu — NcclReducer on the GPUs of one process.
//
// Built whenever CUDA and NCCL are found, so CI at least compiles and links
// gnmr/comm/nccl.cuh; exits 77 (CTest: skipped) without a GPU.
// One communicator per visible GPU (ncclCommInitAll, at most 4; one GPU is
// enough). Checks:
//  - max with a NaN on the last device: +Inf on every device, exact maxima
//    elsewhere; sum: every device holds the same bits, equal to the input
//    with one device and within R fp32 ulps of the host sum otherwise;
//  - a controller trace: decisions from NCCL-reduced partials equal those of
//    gnmr::NoReduce on the host-combined partials (bit for bit with one GPU);
//  - the reduce (NaN kernel + ncclAllReduce) captured in a CUDA graph and
//    replayed gives the same result as the eager call.
#include <cuda_runtime.h>
#include <nccl.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "gnmr/comm/nccl.cuh"
#include "gnmr/comm/reducer.hpp"
#include "gnmr/host/controller.hpp"
#include "../cuda/harness.cuh"  // EXPECT, failures(), same_bits(): the GPU tests' harness

namespace {

using gpu_test::same_bits;

// A CUDA or NCCL failure ends the program: nothing after it would mean anything.
#define CUDA_OK(x)                                                                          \
  do {                                                                                      \
    cudaError_t e_ = (x);                                                                   \
    if (e_ != cudaSuccess) {                                                                \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                         \
    }                                                                                       \
  } while (0)
#define NCCL_OK(x)                                                                          \
  do {                                                                                      \
    ncclResult_t r_ = (x);                                                                  \
    if (r_ != ncclSuccess) {                                                                \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, ncclGetErrorString(r_)); \
      std::exit(1);                                                                         \
    }                                                                                       \
  } while (0)

float urand(std::uint64_t& s) {  // xorshift, deterministic
  s ^= s << 13;
  s ^= s >> 7;
  s ^= s << 17;
  return static_cast<float>((s >> 40) & 0xffffff) / 16777216.0f;
}

struct Devices {
  int n = 0;
  std::vector<ncclComm_t> comms;
  std::vector<cudaStream_t> streams;
  std::vector<float*> buf;
  std::vector<gnmr::cuda::NcclReducer> red;
};

// host[d] -> device d, reduce on all devices (one NCCL group), -> out[d].
void reduce_all(Devices& D, const std::vector<std::vector<float>>& host, gnmr::Combine op,
                std::vector<std::vector<float>>& out) {
  const std::size_t n = host[0].size();
  for (int d = 0; d < D.n; ++d) {
    CUDA_OK(cudaSetDevice(d));
    CUDA_OK(cudaMemcpyAsync(D.buf[d], host[d].data(), n * 4, cudaMemcpyHostToDevice, D.streams[d]));
  }
  NCCL_OK(ncclGroupStart());
  for (int d = 0; d < D.n; ++d) {
    CUDA_OK(cudaSetDevice(d));
    D.red[d].allreduce(D.buf[d], n, op, D.streams[d]);
  }
  NCCL_OK(ncclGroupEnd());
  out.assign(D.n, std::vector<float>(n));
  for (int d = 0; d < D.n; ++d) {
    CUDA_OK(cudaSetDevice(d));
    CUDA_OK(cudaMemcpyAsync(out[d].data(), D.buf[d], n * 4, cudaMemcpyDeviceToHost, D.streams[d]));
    CUDA_OK(cudaStreamSynchronize(D.streams[d]));
  }
}

// Rank-order host combine, with the reducer's NaN -> +Inf rule for max.
std::vector<float> host_combine(const std::vector<std::vector<float>>& host, gnmr::Combine op) {
  std::vector<float> r = host[0];
  for (std::size_t i = 0; i < r.size(); ++i) {
    for (std::size_t d = 0; d < host.size(); ++d) {
      float x = host[d][i];
      if (op == gnmr::Combine::kMax && gnmr::is_nan(x)) x = gnmr::inf_f();
      r[i] = d == 0 ? x : (op == gnmr::Combine::kSum ? gnmr::math::add(r[i], x) : gnmr::math::max_nan(r[i], x));
    }
  }
  return r;
}

}  // namespace

int main() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    const char* req = std::getenv("GNMR_REQUIRE_GPU");  // set by bench/gpu.sh
    const bool required = req && req[0] == '1';
    std::printf("nccl_reducer_gpu: no usable GPU (%s): %s\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "0 devices",
                required ? "FAILED (GNMR_REQUIRE_GPU=1)" : "skipped");
    return required ? 1 : 77;
  }
  Devices D;
  D.n = count < 4 ? count : 4;
  std::vector<int> devs(D.n);
  for (int d = 0; d < D.n; ++d) devs[d] = d;
  D.comms.resize(D.n);
  NCCL_OK(ncclCommInitAll(D.comms.data(), D.n, devs.data()));
  constexpr std::size_t kN = 37;
  D.streams.resize(D.n);
  D.buf.resize(D.n);
  for (int d = 0; d < D.n; ++d) {
    CUDA_OK(cudaSetDevice(d));
    CUDA_OK(cudaStreamCreateWithFlags(&D.streams[d], cudaStreamNonBlocking));
    CUDA_OK(cudaMalloc(&D.buf[d], kN * 4));
    D.red.emplace_back(D.comms[d]);
  }
  const double ulps = 1.2e-7 * D.n;

  // 1. NaN / Inf handling and cross-device agreement.
  std::uint64_t seed = 0x1234567u;
  for (gnmr::Combine op : {gnmr::Combine::kSum, gnmr::Combine::kMax}) {
    std::vector<std::vector<float>> host(D.n, std::vector<float>(kN)), out;
    for (int d = 0; d < D.n; ++d)
      for (std::size_t i = 0; i < kN; ++i) host[d][i] = 100.0f * urand(seed);
    host[D.n - 1][3] = gnmr::nan_f();
    host[0][5] = gnmr::inf_f();
    reduce_all(D, host, op, out);
    const std::vector<float> ref = host_combine(host, op);
    for (int d = 0; d < D.n; ++d)
      EXPECT(std::memcmp(out[d].data(), out[0].data(), kN * 4) == 0, "device %d differs from device 0", d);
    for (std::size_t i = 0; i < kN; ++i) {
      if (op == gnmr::Combine::kMax || D.n == 1) {
        EXPECT(same_bits(out[0][i], ref[i]) || (gnmr::is_nan(out[0][i]) && gnmr::is_nan(ref[i])),
              "op %d unit %zu: %g vs %g", static_cast<int>(op), i, out[0][i], ref[i]);
      } else if (gnmr::is_finite(ref[i])) {
        EXPECT(std::fabs(out[0][i] - ref[i]) <= ulps * ref[i], "sum unit %zu: %g vs %g", i, out[0][i], ref[i]);
      }
    }
    EXPECT(!gnmr::is_finite(out[0][3]) && !gnmr::is_finite(out[0][5]), "non-finite partials must stay non-finite");
    if (op == gnmr::Combine::kMax) EXPECT(same_bits(out[0][3], gnmr::inf_f()), "max NaN -> +Inf");
  }

  // 2. A controller trace, against NoReduce on the host-combined partials.
  for (gnmr::Combine op : {gnmr::Combine::kSum, gnmr::Combine::kMax}) {
    gnmr::GnmrController<> a(kN), b(kN);
    gnmr::GnmrController<gnmr::LinfNorm> la(kN), lb(kN);
    gnmr::NoReduce none;
    int mismatch = 0;
    for (int t = 1; t <= 200; ++t) {
      std::vector<std::vector<float>> host(D.n, std::vector<float>(kN)), out;
      for (int d = 0; d < D.n; ++d)
        for (std::size_t i = 0; i < kN; ++i) {
          float x = (1.0f + 0.1f * urand(seed)) / static_cast<float>(D.n);
          if (t > 20 && (t * 7 + static_cast<int>(i)) % 53 == 0) x *= 40.0f;  // spikes, some contention
          host[d][i] = op == gnmr::Combine::kSum ? x * x : x;
        }
      if (t % 50 == 0) host[D.n - 1][static_cast<std::size_t>(t) % kN] = gnmr::nan_f();
      reduce_all(D, host, op, out);
      std::vector<float> ref = host_combine(host, op);
      if (op == gnmr::Combine::kSum) {
        a.step(out[0]);
        gnmr::reduce_and_step(b, none, ref.data(), ref.size());
        for (std::size_t i = 0; i < kN; ++i)
          mismatch += a.decisions()[i].flags != b.decisions()[i].flags ||
                      (D.n == 1 && !same_bits(a.decisions()[i].scale, b.decisions()[i].scale));
      } else {
        la.step(out[0]);
        gnmr::reduce_and_step(lb, none, ref.data(), ref.size());
        for (std::size_t i = 0; i < kN; ++i)
          mismatch += la.decisions()[i].flags != lb.decisions()[i].flags ||
                      !same_bits(la.decisions()[i].scale, lb.decisions()[i].scale);
      }
    }
    EXPECT(mismatch == 0, "op %d: %d decision mismatches vs NoReduce", static_cast<int>(op), mismatch);
  }

  // 3. Graph capture (device 0 alone: a single-communicator capture).
  if (D.n == 1) {
    CUDA_OK(cudaSetDevice(0));
    std::vector<float> in(kN), eager(kN), replay(kN);
    for (std::size_t i = 0; i < kN; ++i) in[i] = urand(seed);
    in[7] = gnmr::nan_f();
    CUDA_OK(cudaMemcpy(D.buf[0], in.data(), kN * 4, cudaMemcpyHostToDevice));
    D.red[0].allreduce(D.buf[0], kN, gnmr::Combine::kMax, D.streams[0]);
    CUDA_OK(cudaMemcpyAsync(eager.data(), D.buf[0], kN * 4, cudaMemcpyDeviceToHost, D.streams[0]));
    CUDA_OK(cudaStreamSynchronize(D.streams[0]));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CUDA_OK(cudaStreamBeginCapture(D.streams[0], cudaStreamCaptureModeGlobal));
    D.red[0].allreduce(D.buf[0], kN, gnmr::Combine::kMax, D.streams[0]);
    CUDA_OK(cudaStreamEndCapture(D.streams[0], &graph));
    CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    for (int rep = 0; rep < 3; ++rep) {
      CUDA_OK(cudaMemcpyAsync(D.buf[0], in.data(), kN * 4, cudaMemcpyHostToDevice, D.streams[0]));
      CUDA_OK(cudaGraphLaunch(exec, D.streams[0]));
      CUDA_OK(cudaMemcpyAsync(replay.data(), D.buf[0], kN * 4, cudaMemcpyDeviceToHost, D.streams[0]));
      CUDA_OK(cudaStreamSynchronize(D.streams[0]));
      EXPECT(std::memcmp(replay.data(), eager.data(), kN * 4) == 0, "graph replay %d differs", rep);
    }
    EXPECT(same_bits(eager[7], gnmr::inf_f()), "captured NaN -> +Inf");
    CUDA_OK(cudaGraphExecDestroy(exec));
    CUDA_OK(cudaGraphDestroy(graph));
  }

  // Cost, for docs/record/distributed.md: one all-reduce of 10,000 unit partials
  // (fp32 sums), 200 back to back on every device, timed with events on
  // device 0. A log line, not a check: the GPU count sets what it means.
  {
    constexpr std::size_t kUnits = 10000;
    constexpr int kReps = 200;
    std::vector<float*> big(D.n);
    for (int d = 0; d < D.n; ++d) {
      CUDA_OK(cudaSetDevice(d));
      CUDA_OK(cudaMalloc(&big[d], kUnits * 4));
      CUDA_OK(cudaMemsetAsync(big[d], 0, kUnits * 4, D.streams[d]));
    }
    const auto round = [&] {
      NCCL_OK(ncclGroupStart());
      for (int d = 0; d < D.n; ++d) {
        CUDA_OK(cudaSetDevice(d));
        D.red[d].allreduce(big[d], kUnits, gnmr::Combine::kSum, D.streams[d]);
      }
      NCCL_OK(ncclGroupEnd());
    };
    for (int i = 0; i < 10; ++i) round();
    cudaEvent_t e0, e1;
    CUDA_OK(cudaSetDevice(0));
    CUDA_OK(cudaEventCreate(&e0));
    CUDA_OK(cudaEventCreate(&e1));
    CUDA_OK(cudaEventRecord(e0, D.streams[0]));
    for (int i = 0; i < kReps; ++i) round();
    CUDA_OK(cudaSetDevice(0));
    CUDA_OK(cudaEventRecord(e1, D.streams[0]));
    for (int d = 0; d < D.n; ++d) {
      CUDA_OK(cudaSetDevice(d));
      CUDA_OK(cudaStreamSynchronize(D.streams[d]));
    }
    float ms = 0.0f;
    CUDA_OK(cudaSetDevice(0));
    CUDA_OK(cudaEventElapsedTime(&ms, e0, e1));
    std::printf("nccl_reducer_gpu: all-reduce of %zu floats over %d device(s): %.2f us each (%d back to back)\n",
                kUnits, D.n, 1e3 * ms / kReps, kReps);
    CUDA_OK(cudaEventDestroy(e0));
    CUDA_OK(cudaEventDestroy(e1));
    for (int d = 0; d < D.n; ++d) {
      CUDA_OK(cudaSetDevice(d));
      CUDA_OK(cudaFree(big[d]));
    }
  }

  const gnmr::ReducerStats st = D.red[0].stats();
  std::printf("nccl_reducer_gpu: %d device(s), %llu collectives, %llu bytes on device 0: %s\n", D.n,
              static_cast<unsigned long long>(st.collectives), static_cast<unsigned long long>(st.bytes),
              gpu_test::failures() ? "FAILED" : "passed");
  for (int d = 0; d < D.n; ++d) {
    CUDA_OK(cudaSetDevice(d));
    CUDA_OK(cudaFree(D.buf[d]));
    CUDA_OK(cudaStreamDestroy(D.streams[d]));
    ncclCommDestroy(D.comms[d]);
  }
  return gpu_test::failures() ? 1 : 0;
}
