// gnmr_bench_cuda — timings of the CUDA backend against rooflines measured
// in the same run (bench/gpu.sh runs it on the GPU machine).
//
//   per-unit norms   llama-1.26B fp32, 10k x 64K fp32, llama2-13B bf16,
//                    at several chunk sizes; roofline = a plain vectorised
//                    read of the same flat gradient buffer
//   controller step  10,000 and 1,000,000 units (stream and CUDA graph)
//   presets          the same, for controllers built by name (make_device):
//                    gnmr, the systemic rule's actions, layered controllers
//   telemetry        the controller step with and without TelemetryDrain
//   AdamW            llama-1.26B, fp32 grads: unguarded fused AdamW
//                    (28 B/param) and the guarded step = norms + controller
//                    + AdamW (32 B/param); roofline = bytes / copy bandwidth
//   fused            llama-1.26B fp32 (issue 22): a framework's unscale pass
//                    + unguarded AdamW, against unscale + norms + controller +
//                    guarded AdamW (two reads of the gradients) and the
//                    unscale pass depositing the norms (fused_partials.cuh)
//                    + fold + controller + guarded AdamW; target <= 1.02x
// Timing: CUDA events, warm-up, median of --reps runs; inputs are random
// (hash-filled), never zeros, and far larger than L2 except the controller
// state itself. Prints a markdown table last. --only norms|controller|presets|
// telemetry|adamw|fused runs one part (for a profiler), --quick skips the 13B
// layout, --reps N. The shared harness (BK, report, median_ms) is in
// harness.cuh, the controller parts in controllers.cuh.
#include <cuda_runtime.h>

#include <algorithm>
#include <memory>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gnmr/cuda/all.cuh"
#include "../../examples/unscale_check.hpp"
#include "controllers.cuh"
#include "harness.cuh"
#include "layouts.hpp"

namespace {

using namespace bench;  // BK, report, median_ms, g_* (harness.cuh)

__device__ __forceinline__ std::uint64_t dmix(std::uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
__device__ __forceinline__ float hash_normal(std::uint64_t i, std::uint64_t seed) {
  // Sum of four uniforms: cheap, bell-shaped, never all zero.
  float acc = 0.0f;
  for (int k = 0; k < 4; ++k) {
    const std::uint64_t h = dmix(seed ^ (i * 4 + k));
    acc += static_cast<float>(h >> 40) * (1.0f / 16777216.0f);
  }
  return (acc - 2.0f) * 1.7f;
}
__global__ void fill_kernel(void* p, std::uint64_t n, int dtype, std::uint64_t seed, float scale) {
  for (std::uint64_t i = blockIdx.x * static_cast<std::uint64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::uint64_t>(gridDim.x) * blockDim.x) {
    const float x = scale * hash_normal(i, seed);
    if (dtype == 0)
      static_cast<float*>(p)[i] = x;
    else
      static_cast<std::uint16_t*>(p)[i] = gnmr::float_to_bf16(x);
  }
}
// Setup: runs on the legacy default stream, which the benchmarks' non-blocking
// stream does not wait for, so it finishes before returning; otherwise the
// first timed runs would overlap the fill (and read half-filled data).
void fill(void* p, std::uint64_t n, int dtype, std::uint64_t seed, float scale) {
  fill_kernel<<<132 * 16, 256>>>(p, n, dtype, seed, scale);
  BK(cudaGetLastError());
  BK(cudaDeviceSynchronize());
}

// Read roofline: every byte once, 16-byte loads, four in flight per thread.
__global__ void read_kernel(const uint4* __restrict__ p, std::uint64_t n16, unsigned* sink) {
  unsigned acc = 0;
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  std::uint64_t i = blockIdx.x * static_cast<std::uint64_t>(blockDim.x) + threadIdx.x;
  for (; i + 3 * stride < n16; i += 4 * stride) {
    const uint4 a = __ldg(p + i), b = __ldg(p + i + stride), c = __ldg(p + i + 2 * stride),
                d = __ldg(p + i + 3 * stride);
    acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
  }
  for (; i < n16; i += stride) {
    const uint4 a = __ldg(p + i);
    acc ^= a.x ^ a.y ^ a.z ^ a.w;
  }
  if (acc == 0x12345678u) *sink = acc;  // keeps the loads alive
}
__global__ void copy_kernel(const uint4* __restrict__ a, uint4* __restrict__ b, std::uint64_t n16) {
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t i = blockIdx.x * static_cast<std::uint64_t>(blockDim.x) + threadIdx.x; i < n16; i += stride)
    b[i] = a[i];
}

int g_sms = 132;
unsigned* g_sink = nullptr;

double read_roofline_ms(const void* p, std::uint64_t bytes, cudaStream_t s) {
  return median_ms([&] { read_kernel<<<g_sms * 8, 256, 0, s>>>(static_cast<const uint4*>(p), bytes / 16, g_sink); }, s);
}

// One flat gradient buffer with every tensor at a 256-byte boundary.
struct Flat {
  gnmr::cuda::DeviceBuffer buf;
  std::vector<void*> ptr;
  std::uint64_t bytes = 0;
  Flat(const bench_layouts::Layout& L, std::size_t esize, int dtype, std::uint64_t seed) {
    std::vector<std::uint64_t> off;
    std::uint64_t total = 0;
    for (std::uint64_t n : L.numel) {
      off.push_back(total);
      total = (total + n * esize + 255) / 256 * 256;
    }
    bytes = total;
    buf = gnmr::cuda::DeviceBuffer(total, "bench: grads");
    for (std::uint64_t o : off) ptr.push_back(static_cast<unsigned char*>(buf.get()) + o);
    // One fill over the whole buffer (padding included), random per tensor scale is not needed
    // for bandwidth; spikes are the controller bench's business.
    fill(buf.get(), total / esize, dtype, seed, 0.01f);
  }
};

void bench_norms(const bench_layouts::Layout& L, gnmr::DType dt, cudaStream_t s) {
  const std::size_t es = dt == gnmr::DType::kF32 ? 4 : 2;
  Flat f(L, es, dt == gnmr::DType::kF32 ? 0 : 1, 42);
  std::vector<gnmr::Segment> segs;
  for (std::size_t i = 0; i < L.numel.size(); ++i)
    segs.push_back({f.ptr[i], L.numel[i], dt, static_cast<std::uint32_t>(i)});
  const double data_bytes = static_cast<double>(L.total() * es);
  const double roof = read_roofline_ms(f.buf.get(), f.bytes, s) * data_bytes / static_cast<double>(f.bytes);
  report("read roofline", L.name + " " + gnmr::dtype_name(dt), roof, data_bytes, roof, "-");
  gnmr::cuda::DeviceBuffer out(L.numel.size() * sizeof(float));
  for (std::uint64_t chunk : {16384ull, 32768ull, 65536ull, 131072ull}) {
    gnmr::cuda::NormPlan plan(segs, L.numel.size(), gnmr::cuda::NormPlanOptions{chunk});
    const double ms =
        median_ms([&] { BK(gnmr::cuda::unit_partials<gnmr::L2Norm>(plan, out.as<float>(), s)); }, s);
    report("norms chunk " + std::to_string(chunk / 1024) + "K", L.name + " " + gnmr::dtype_name(dt), ms, data_bytes,
           roof, chunk == gnmr::detail::kDefaultNormChunk ? "<= 1.10x roofline" : "(sweep)");
  }
}

double copy_bandwidth(cudaStream_t s) {
  const std::uint64_t bytes = 4ull << 30;
  gnmr::cuda::DeviceBuffer a(bytes), b(bytes);
  fill(a.get(), bytes / 4, 0, 1, 1.0f);
  const double ms =
      median_ms([&] { copy_kernel<<<g_sms * 8, 256, 0, s>>>(a.as<uint4>(), b.as<uint4>(), bytes / 16); }, s);
  const double bw = 2.0 * bytes / (ms * 1e-3);
  report("copy roofline (read+write)", "4 GiB", ms, 2.0 * bytes, ms, "-");
  return bw;
}

// The llama-1.26B fp32 training state both AdamW parts time: gradients,
// weights and zeroed moments, the norm plan, a default controller, the
// AdamW plan. seed: the first of the four fills' seeds.
struct AdamWState {
  bench_layouts::Layout L = bench_layouts::llama_1b26();
  Flat g, p, m, v;
  std::vector<gnmr::Segment> segs;
  std::vector<gnmr::AdamWTensor> ts;
  std::size_t units = L.numel.size();
  std::unique_ptr<gnmr::cuda::NormPlan> plan;
  std::unique_ptr<gnmr::cuda::DeviceController<>> ctl;
  std::unique_ptr<gnmr::cuda::AdamWPlan> opt;
  gnmr::cuda::DeviceBuffer partials{units * sizeof(float)};
  gnmr::AdamWParams h;
  explicit AdamWState(std::uint64_t seed)
      : g(L, 4, 0, seed), p(L, 4, 0, seed + 1), m(L, 4, 0, seed + 2), v(L, 4, 0, seed + 3) {
    // Moments must be valid (v >= 0): start them at zero like a fresh optimizer.
    BK(cudaMemset(m.buf.get(), 0, m.bytes));
    BK(cudaMemset(v.buf.get(), 0, v.bytes));
    BK(cudaDeviceSynchronize());  // cudaMemset is asynchronous and on the legacy stream
    for (std::size_t i = 0; i < units; ++i) {
      const auto u = static_cast<std::uint32_t>(i);
      segs.push_back({g.ptr[i], L.numel[i], gnmr::DType::kF32, u});
      ts.push_back({static_cast<float*>(p.ptr[i]), g.ptr[i], static_cast<float*>(m.ptr[i]),
                    static_cast<float*>(v.ptr[i]), L.numel[i], gnmr::DType::kF32, u});
    }
    plan.reset(new gnmr::cuda::NormPlan(segs, units));
    ctl.reset(new gnmr::cuda::DeviceController<>(units));
    opt.reset(new gnmr::cuda::AdamWPlan(ts, units));
    h.lr = 1e-6f;
  }
};

void bench_adamw(double copy_bw, cudaStream_t s) {
  AdamWState st(11);
  const bench_layouts::Layout& L = st.L;
  gnmr::cuda::NormPlan& plan = *st.plan;
  gnmr::cuda::DeviceController<>& ctl = *st.ctl;
  gnmr::cuda::AdamWPlan& opt = *st.opt;
  gnmr::cuda::DeviceBuffer& partials = st.partials;
  const gnmr::AdamWParams h = st.h;
  const double n = static_cast<double>(L.total());
  const double plain = median_ms([&] { BK(gnmr::cuda::adamw_step(opt, h, nullptr, s)); }, s);
  report("fused AdamW, unguarded (28 B/param)", L.name, plain, 28.0 * n, 28.0 * n / copy_bw * 1e3, "-");
  const auto guarded = [&] {
    BK(gnmr::cuda::unit_partials(plan, partials.as<float>(), s));
    BK(ctl.step(partials.as<float>(), s));
    BK(gnmr::cuda::adamw_step(opt, h, ctl.decisions(), s, nullptr, ctl.summary()));
  };
  const double gs = median_ms(guarded, s);
  report("guarded AdamW step (norms+ctl+AdamW, 32 B/param)", L.name, gs, 32.0 * n, 32.0 * n / copy_bw * 1e3,
         "< 15.0 ms and <= 1.10x roofline");
  cudaGraph_t gr;
  cudaGraphExec_t ge;
  BK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  guarded();
  BK(cudaStreamEndCapture(s, &gr));
  BK(cudaGraphInstantiate(&ge, gr, 0));
  const double gg = median_ms([&] { BK(cudaGraphLaunch(ge, s)); }, s);
  report("guarded AdamW step, CUDA graph", L.name, gg, 32.0 * n, 32.0 * n / copy_bw * 1e3,
         "< 15.0 ms and <= 1.10x roofline");
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(gr);
}

// The framework's own unscale pass (what it runs with or without gnmr):
// g *= inv in place, a found-inf flag; 16-byte accesses over the flat buffer.
__global__ void unscale_plain(uint4* g, std::uint64_t n16, float inv, unsigned* found) {
  const example::UnscaleCheck xf{inv, found};
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t i = blockIdx.x * static_cast<std::uint64_t>(blockDim.x) + threadIdx.x; i < n16; i += stride) {
    gnmr::detail::Vec16 v;
    const uint4 u = g[i];
    v.w[0] = u.x, v.w[1] = u.y, v.w[2] = u.z, v.w[3] = u.w;
    xf.vec<gnmr::detail::kDF32>(v, reinterpret_cast<const gnmr::detail::Vec16*>(g + i));
  }
}
// The same pass depositing gnmr's chunk partials (one block per chunk).
__global__ void unscale_fused(gnmr::cuda::FusedNormView view, float inv, unsigned* found) {
  gnmr::cuda::deposit_chunk_partial<gnmr::L2Norm>(view, blockIdx.x, example::UnscaleCheck{inv, found});
}

void bench_fused(double copy_bw, cudaStream_t s) {
  AdamWState st(21);
  const bench_layouts::Layout& L = st.L;
  const Flat& g = st.g;
  gnmr::cuda::NormPlan& plan = *st.plan;
  gnmr::cuda::DeviceController<>& ctl = *st.ctl;
  gnmr::cuda::AdamWPlan& opt = *st.opt;
  gnmr::cuda::DeviceBuffer& partials = st.partials;
  gnmr::cuda::DeviceBuffer found(sizeof(unsigned));
  const gnmr::AdamWParams h = st.h;
  // inv = 1: the gradients keep their values run after run (what is timed
  // is the traffic, not the arithmetic).
  const float inv = 1.0f;
  const double n = static_cast<double>(L.total());
  const auto unscale = [&] {
    unscale_plain<<<g_sms * 8, 256, 0, s>>>(static_cast<uint4*>(g.buf.get()), g.bytes / 16, inv, found.as<unsigned>());
    BK(cudaGetLastError());
  };
  const double unguarded = median_ms([&] { unscale(); BK(gnmr::cuda::adamw_step(opt, h, nullptr, s)); }, s);
  report("unscale + fused AdamW, unguarded (36 B/param)", L.name, unguarded, 36.0 * n, 36.0 * n / copy_bw * 1e3, "-");
  const double two = median_ms([&] {
    unscale();
    BK(gnmr::cuda::unit_partials(plan, partials.as<float>(), s));
    BK(ctl.step(partials.as<float>(), s));
    BK(gnmr::cuda::adamw_step(opt, h, ctl.decisions(), s, nullptr, ctl.summary()));
  }, s);
  report("unscale + norms + ctl + guarded AdamW (40 B/param)", L.name, two, 40.0 * n, 40.0 * n / copy_bw * 1e3,
         "x" + std::to_string(two / unguarded).substr(0, 5) + " of unguarded");
  const double fused = median_ms([&] {
    unscale_fused<<<static_cast<unsigned>(plan.num_chunks()), gnmr::cuda::kFusedThreads, 0, s>>>(
        gnmr::cuda::fused_view(plan), inv, found.as<unsigned>());
    BK(cudaGetLastError());
    BK(gnmr::cuda::fold_unit_partials(plan, partials.as<float>(), s));
    BK(ctl.step(partials.as<float>(), s));
    BK(gnmr::cuda::adamw_step(opt, h, ctl.decisions(), s, nullptr, ctl.summary()));
  }, s);
  report("unscale with norms + fold + ctl + guarded AdamW (36 B/param)", L.name, fused, 36.0 * n,
         36.0 * n / copy_bw * 1e3,
         "<= 1.02x unguarded: x" + std::to_string(fused / unguarded).substr(0, 5));
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--quick")) g_quick = true;
    if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) g_reps = std::atoi(argv[++i]);
    if (!std::strcmp(argv[i], "--only") && i + 1 < argc) g_only = argv[++i];
  }
  const auto want = [](const char* part) { return g_only.empty() || g_only == part; };
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("gnmr_bench_cuda: no CUDA device\n");
    return 77;
  }
  cudaDeviceProp prop{};
  BK(cudaGetDeviceProperties(&prop, 0));
  g_sms = prop.multiProcessorCount;
  std::printf("gnmr_bench_cuda on %s, %d SMs, %.0f MB L2, %.1f GB; reps %d%s\n", prop.name, g_sms,
              prop.l2CacheSize / 1e6, prop.totalGlobalMem / 1e9, g_reps, g_quick ? " [quick]" : "");
  BK(cudaMalloc(&g_sink, sizeof(unsigned)));
  cudaStream_t s;
  BK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  const double copy_bw = want("norms") || want("adamw") || want("fused") ? copy_bandwidth(s) : 0.0;
  if (want("norms")) {
    bench_norms(bench_layouts::llama_1b26(), gnmr::DType::kF32, s);
    bench_norms(bench_layouts::many_small(), gnmr::DType::kF32, s);
    if (!g_quick && prop.totalGlobalMem > (40ull << 30))
      bench_norms(bench_layouts::llama2_13b(), gnmr::DType::kBF16, s);
  }
  if (want("controller")) {
    bench_controller(10000, s);
    bench_controller(1000000, s);
  }
  if (want("presets")) {
    bench_presets(10000, s);
    bench_presets(1000000, s);
  }
  if (want("telemetry")) {
    bench_telemetry(10000, s);
    bench_telemetry(1000000, s);
  }
  if (want("adamw") && prop.totalGlobalMem > (30ull << 30)) bench_adamw(copy_bw, s);
  if (want("fused") && prop.totalGlobalMem > (30ull << 30)) bench_fused(copy_bw, s);

  std::printf("\n| work | layout | median ms | GB/s | roofline ms | x roofline | target |\n");
  std::printf("|---|---|---:|---:|---:|---:|---|\n");
  for (const Row& r : g_rows)
    std::printf("| %s | %s | %.4f | %.0f | %s | %s | %s |\n", r.work.c_str(), r.layout.c_str(), r.ms, r.gbps,
                r.roof_ms > 0 ? std::to_string(r.roof_ms).substr(0, 7).c_str() : "-",
                r.roof_ms > 0 ? std::to_string(r.ms / r.roof_ms).substr(0, 5).c_str() : "-", r.target.c_str());
  cudaStreamDestroy(s);
  cudaFree(g_sink);
  return 0;
}
