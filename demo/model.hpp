// demo/model.hpp — a small character-level decoder-only transformer (GPT-2
// layout: pre-LayerNorm blocks, causal multi-head self-attention, GELU MLP,
// learned positions) built from torch::nn modules.
//
// Every linear layer's input goes through demo::fake_quant first, so the
// --stress flag reaches the whole network (attention projections, MLP, head).
// Attention is written out (masked softmax) instead of calling
// scaled_dot_product_attention, which libtorch 1.13 lacks: the same source
// builds against Debian's libtorch 1.13 and PyTorch 2.x's libtorch.
#pragma once

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "quant.hpp"

namespace demo {

struct ModelConfig {
  int vocab = 0;
  int ctx = 64;
  int width = 64;
  int heads = 4;
  int layers = 2;
};

// nn::Linear whose input is fake-quantized under the current stress.
struct QLinearImpl : torch::nn::Module {
  QLinearImpl(int in, int out, const Stress* stress) : stress_(stress) {
    lin = register_module("lin", torch::nn::Linear(in, out));
  }
  torch::Tensor forward(const torch::Tensor& x) { return lin->forward(fake_quant(x, *stress_)); }
  torch::nn::Linear lin{nullptr};
  const Stress* stress_;
};
TORCH_MODULE(QLinear);

struct BlockImpl : torch::nn::Module {
  BlockImpl(const ModelConfig& c, const Stress* s) : heads(c.heads) {
    ln1 = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.width})));
    qkv = register_module("qkv", QLinear(c.width, 3 * c.width, s));
    proj = register_module("proj", QLinear(c.width, c.width, s));
    ln2 = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.width})));
    fc = register_module("fc", QLinear(c.width, 4 * c.width, s));
    out = register_module("out", QLinear(4 * c.width, c.width, s));
  }

  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& mask) {
    const auto B = x.size(0), T = x.size(1), C = x.size(2), hd = C / heads;
    auto qkv_ = qkv->forward(ln1->forward(x)).view({B, T, 3, heads, hd}).permute({2, 0, 3, 1, 4});
    auto q = qkv_[0], k = qkv_[1], v = qkv_[2];  // [B, H, T, hd]
    auto att = torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(hd)));
    att = torch::softmax(att.masked_fill(mask, -INFINITY), -1);
    auto y = torch::matmul(att, v).transpose(1, 2).contiguous().view({B, T, C});
    auto h = x + proj->forward(y);
    return h + out->forward(torch::gelu(fc->forward(ln2->forward(h))));
  }

  int heads;
  torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  QLinear qkv{nullptr}, proj{nullptr}, fc{nullptr}, out{nullptr};
};
TORCH_MODULE(Block);

struct GptImpl : torch::nn::Module {
  GptImpl(const ModelConfig& c, const Stress* s) {
    if (c.width % c.heads != 0) throw std::invalid_argument("--width must be a multiple of 4");
    tok = register_module("tok", torch::nn::Embedding(c.vocab, c.width));
    pos = register_module("pos", torch::nn::Embedding(c.ctx, c.width));
    for (int l = 0; l < c.layers; ++l)
      blocks.push_back(register_module("h" + std::to_string(l), Block(c, s)));
    lnf = register_module("lnf", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.width})));
    head = register_module("head", QLinear(c.width, c.vocab, s));
    // GPT-2 init: N(0, 0.02), residual projections scaled by 1/sqrt(2L).
    torch::NoGradGuard ng;
    for (auto& p : named_parameters()) {
      const auto& n = p.key();
      auto& w = p.value();
      if (n.find("ln") != std::string::npos) continue;  // LayerNorm: ones/zeros
      if (n.size() >= 4 && n.compare(n.size() - 4, 4, "bias") == 0) {
        w.zero_();
      } else {
        const bool resid = n.find("proj") != std::string::npos || n.find(".out.") != std::string::npos;
        w.normal_(0.0, resid ? 0.02 / std::sqrt(2.0 * c.layers) : 0.02);
      }
    }
  }

  // Logits [B, T, vocab].
  torch::Tensor forward(const torch::Tensor& idx) {
    const auto T = idx.size(1);
    auto positions = torch::arange(T, torch::TensorOptions().dtype(torch::kLong).device(idx.device()));
    auto x = tok->forward(idx) + pos->forward(positions).unsqueeze(0);
    auto mask = torch::ones({T, T}, torch::TensorOptions().dtype(torch::kBool).device(idx.device()))
                    .triu(1);
    for (auto& b : blocks) x = b->forward(x, mask);
    return head->forward(lnf->forward(x));
  }

  torch::Tensor loss(const torch::Tensor& idx, const torch::Tensor& targets) {
    auto logits = forward(idx);
    return torch::nn::functional::cross_entropy(logits.view({-1, logits.size(-1)}),
                                                targets.view({-1}));
  }

  torch::nn::Embedding tok{nullptr}, pos{nullptr};
  std::vector<Block> blocks;
  torch::nn::LayerNorm lnf{nullptr};
  QLinear head{nullptr};
};
TORCH_MODULE(Gpt);

}  // namespace demo
