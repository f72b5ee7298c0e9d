// Host per-unit partial norms (gnmr/host/unit_norms.hpp): how fast a CPU reduces
// a whole model's gradients to one partial per unit, for fp32/bf16/fp16.
//
// Layouts (one unit per tensor):
//  * llama: a LLaMA-like model scaled down to ~64M elements so a run is
//    quick: d=384, ffn=1024, 22 layers of {attn_norm, wq, wk, wv, wo,
//    mlp_norm, w_gate, w_up, w_down}, token embedding and lm_head of
//    32000 x 384 (the two embedding-sized tensors hold 39% of the elements,
//    as in the docs/performance.md anchor), final norm: 201 tensors, 63.5M elements.
//  * uniform: 1000 tensors x 64Ki elements (65.5M), the many-tensors case.
// BM_HostPartials is the default order (HostOrder::kFast), and
// BM_HostPartialsKernelOrder the CUDA kernel's (HostOrder::kKernel).
// Bytes processed = gradient bytes read (numel * dtype size); the per-unit
// output is negligible. Single thread: host_unit_partials does not spawn,
// so the rates use CPU time (the default), which a shared machine's other
// load does not inflate.
#include <gnmr/host/block_sumsq.hpp>
#include <gnmr/host/chunk_sumsq.hpp>
#include <gnmr/host/unit_norms.hpp>
#include <gnmr/policy/norm.hpp>

#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace {

enum class LayoutKind { kLlama, kUniform };

std::vector<std::uint64_t> layout_sizes(LayoutKind k) {
  std::vector<std::uint64_t> s;
  if (k == LayoutKind::kUniform) return std::vector<std::uint64_t>(1000, 65536);
  const std::uint64_t d = 384, ffn = 1024, vocab = 32000, layers = 22;
  s.push_back(vocab * d);  // token embedding
  for (std::uint64_t l = 0; l < layers; ++l) {
    s.push_back(d);                            // attn_norm
    for (int i = 0; i < 4; ++i) s.push_back(d * d);  // wq wk wv wo
    s.push_back(d);                            // mlp_norm
    s.push_back(ffn * d);                      // w_gate
    s.push_back(ffn * d);                      // w_up
    s.push_back(d * ffn);                      // w_down
  }
  s.push_back(d);          // final norm
  s.push_back(vocab * d);  // lm_head
  return s;
}

std::size_t dtype_size(gnmr::DType t) { return t == gnmr::DType::kF32 ? 4 : 2; }

// One gradient set at a time (the largest is ~260 MB): rebuilt only when a
// benchmark asks for another layout or dtype, outside the timed loop.
struct Grads {
  LayoutKind kind;
  gnmr::DType dtype;
  std::vector<std::unique_ptr<std::uint8_t[]>> bufs;
  std::vector<gnmr::Segment> segs;
  std::uint64_t bytes = 0;
};

const Grads& grads(LayoutKind kind, gnmr::DType dtype) {
  static std::unique_ptr<Grads> g;
  if (g && g->kind == kind && g->dtype == dtype) return *g;
  g.reset();  // free the previous set first
  g.reset(new Grads{kind, dtype, {}, {}, 0});
  std::uint64_t x = 0x9e3779b97f4a7c15ull;  // xorshift64: fast, values do not matter much
  const std::vector<std::uint64_t> sizes = layout_sizes(kind);
  for (std::size_t t = 0; t < sizes.size(); ++t) {
    const std::uint64_t n = sizes[t];
    g->bufs.emplace_back(new std::uint8_t[n * dtype_size(dtype)]);
    std::uint8_t* p = g->bufs.back().get();
    for (std::uint64_t i = 0; i < n; ++i) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      // Uniform in (-1, 1) * 1e-3: a gradient-like magnitude.
      const float v = (static_cast<float>(x >> 40) * (1.0f / 8388608.0f) - 1.0f) * 1e-3f;
      if (dtype == gnmr::DType::kF32) {
        reinterpret_cast<float*>(p)[i] = v;
      } else {
        reinterpret_cast<std::uint16_t*>(p)[i] =
            dtype == gnmr::DType::kBF16 ? gnmr::float_to_bf16(v) : gnmr::float_to_fp16(v);
      }
    }
    g->segs.push_back(gnmr::Segment{p, n, dtype, static_cast<std::uint32_t>(t)});
    g->bytes += n * dtype_size(dtype);
  }
  return *g;
}

template <class Norm>
void BM_HostPartials(benchmark::State& state, LayoutKind kind, gnmr::DType dtype, gnmr::HostOrder order) {
  const Grads& g = grads(kind, dtype);
  std::vector<float> partials(g.segs.size());
  gnmr::HostNormOptions opt;
  opt.order = order;
  for (auto _ : state) {
    gnmr::host_unit_partials<Norm>(g.segs.data(), g.segs.size(), partials.data(), partials.size(), opt);
    benchmark::DoNotOptimize(partials.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(g.bytes));
  state.counters["tensors"] = static_cast<double>(g.segs.size());
}

// Read roofline of this machine: the same bytes summed as 64-bit integers
// (vectorised, no conversion), for comparison with the norm figures.
void BM_ReadRoofline(benchmark::State& state, LayoutKind kind) {
  const Grads& g = grads(kind, gnmr::DType::kF32);
  for (auto _ : state) {
    std::uint64_t acc = 0;
    for (const gnmr::Segment& s : g.segs) {
      const std::uint64_t* p = static_cast<const std::uint64_t*>(s.data);
      for (std::uint64_t i = 0; i < s.numel / 2; ++i) acc += p[i];
    }
    benchmark::DoNotOptimize(acc);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(g.bytes));
}

// One build of the kernel-order chunk sum (gnmr/host/chunk_sumsq.hpp) over
// every segment, chunk by chunk: the builds give the same bits, so this
// says which is fastest here (best_chunk_isa() picks from it).
void BM_ChunkIsa(benchmark::State& state, LayoutKind kind, gnmr::DType dtype, gnmr::detail::ChunkIsa isa) {
  const Grads& g = grads(kind, dtype);
  const bool bf = dtype == gnmr::DType::kBF16;
  for (auto _ : state) {
    double acc = 0;
    for (const gnmr::Segment& s : g.segs) {
      const auto* p = static_cast<const std::uint16_t*>(s.data);
      for (std::uint64_t off = 0; off < s.numel; off += 65536)
        acc += gnmr::detail::chunk_sumsq16(p + off, s.numel - off < 65536 ? s.numel - off : 65536, bf, isa);
    }
    benchmark::DoNotOptimize(acc);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(g.bytes));
}

// One build of the fast order (gnmr/host/block_sumsq.hpp, the default) over
// every segment: the builds give the same bits (best_block_isa() picks).
void BM_BlockIsa(benchmark::State& state, LayoutKind kind, gnmr::DType dtype, gnmr::detail::BlockIsa isa) {
  const Grads& g = grads(kind, dtype);
  const bool bf = dtype == gnmr::DType::kBF16;
  for (auto _ : state) {
    double acc = 0;
    for (const gnmr::Segment& s : g.segs)
      acc += gnmr::detail::sumsq16_fast(static_cast<const std::uint16_t*>(s.data), s.numel, bf, isa);
    benchmark::DoNotOptimize(acc);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(g.bytes));
}

// Registered at static-initialisation time (BENCHMARK_CAPTURE cannot take a
// template argument); names read BM_HostPartials/<norm>/<layout>_<dtype>
// (the default order, kFast) and BM_HostPartialsKernelOrder/... (kKernel).
template <class Norm>
void add(const char* layout_name, LayoutKind kind, gnmr::DType dtype, gnmr::HostOrder order = gnmr::HostOrder::kFast) {
  const std::string name = std::string(order == gnmr::HostOrder::kFast ? "BM_HostPartials/" : "BM_HostPartialsKernelOrder/") +
                           Norm::kName + "/" + layout_name + "_" + gnmr::dtype_name(dtype);
  benchmark::RegisterBenchmark(name.c_str(), BM_HostPartials<Norm>, kind, dtype, order)
      ->Unit(benchmark::kMillisecond)
      ->MinTime(0.3);
}

const bool registered = [] {
  using gnmr::DType;
  benchmark::RegisterBenchmark("BM_ReadRoofline/llama_f32", BM_ReadRoofline, LayoutKind::kLlama)
      ->Unit(benchmark::kMillisecond)
      ->MinTime(0.3);
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
    add<gnmr::L2Norm>("llama", LayoutKind::kLlama, t);
    add<gnmr::LinfNorm>("llama", LayoutKind::kLlama, t);
  }
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16})
    add<gnmr::L2Norm>("uniform_1000x64K", LayoutKind::kUniform, t);
  for (DType t : {DType::kBF16, DType::kF16}) {
    add<gnmr::L2Norm>("llama", LayoutKind::kLlama, t, gnmr::HostOrder::kKernel);
    add<gnmr::L2Norm>("uniform_1000x64K", LayoutKind::kUniform, t, gnmr::HostOrder::kKernel);
  }
  using gnmr::detail::BlockIsa;
  const std::pair<const char*, BlockIsa> bisas[] = {
      {"portable", BlockIsa::kPortable}, {"avx2", BlockIsa::kAvx2}, {"avx512", BlockIsa::kAvx512}};
  for (DType t : {DType::kBF16, DType::kF16})
    for (const auto& i : bisas)
      benchmark::RegisterBenchmark((std::string("BM_BlockIsa/") + i.first + "/llama_" + gnmr::dtype_name(t)).c_str(),
                                   BM_BlockIsa, LayoutKind::kLlama, t, i.second)
          ->Unit(benchmark::kMillisecond)
          ->MinTime(0.3);
  using gnmr::detail::ChunkIsa;
  const std::pair<const char*, ChunkIsa> isas[] = {
      {"portable", ChunkIsa::kPortable}, {"sse", ChunkIsa::kSse}, {"avx2", ChunkIsa::kAvx2}, {"avx512", ChunkIsa::kAvx512}};
  for (DType t : {DType::kBF16, DType::kF16})
    for (const auto& i : isas)
      benchmark::RegisterBenchmark((std::string("BM_ChunkIsa/") + i.first + "/llama_" + gnmr::dtype_name(t)).c_str(),
                                   BM_ChunkIsa, LayoutKind::kLlama, t, i.second)
          ->Unit(benchmark::kMillisecond)
          ->MinTime(0.3);
  return true;
}();

}  // namespace
BENCHMARK_MAIN();
