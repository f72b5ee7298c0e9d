// bench/cuda/layouts.hpp — the tensor layouts the GPU benchmarks run on
// (the docs/record/performance-gpu.md anchors), as lists of element counts.
//
//   llama_1b26: a LLaMA-like 1.26B model, 201 tensors: embedding and
//               lm_head 32000 x 2048, 22 layers of q/k/v/o 2048 x 2048,
//               gate/up/down 2048 x 5632 and two RMSNorm vectors, the final
//               norm. 1,261,529,088 parameters (TinyLlama's shapes with full
//               multi-head k/v).
//   many_small: 10,000 tensors of 65,536 elements.
//   llama2_13b: LLaMA-2-13B, 363 tensors: 32000 x 5120 embedding and
//               lm_head, 40 layers of 5120 x 5120 attention and
//               5120 x 13824 MLP matrices, norms. ~13.0B parameters.
#pragma once

#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

namespace bench_layouts {

struct Layout {
  std::string name;
  std::vector<std::uint64_t> numel;
  std::uint64_t total() const { return std::accumulate(numel.begin(), numel.end(), std::uint64_t{0}); }
};

inline Layout llama(const std::string& name, std::uint64_t vocab, std::uint64_t d, std::uint64_t ffn,
                    int layers) {
  Layout L{name, {}};
  L.numel.push_back(vocab * d);  // embedding: the one segment that dominates
  for (int l = 0; l < layers; ++l) {
    for (int k = 0; k < 4; ++k) L.numel.push_back(d * d);  // q, k, v, o
    for (int k = 0; k < 3; ++k) L.numel.push_back(d * ffn);  // gate, up, down
    L.numel.push_back(d);  // attention norm
    L.numel.push_back(d);  // MLP norm
  }
  L.numel.push_back(d);          // final norm
  L.numel.push_back(vocab * d);  // lm_head
  return L;
}

inline Layout llama_1b26() { return llama("llama-1.26B", 32000, 2048, 5632, 22); }
inline Layout llama2_13b() { return llama("llama2-13B", 32000, 5120, 13824, 40); }
inline Layout many_small() { return Layout{"10k x 64K", std::vector<std::uint64_t>(10000, 65536)}; }

}  // namespace bench_layouts
