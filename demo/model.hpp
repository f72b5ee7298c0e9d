// demo/model.hpp — a small character-level decoder-only transformer (GPT-2
// layout: pre-LayerNorm blocks, causal multi-head self-attention, learned
// positions) with a GELU or a SwiGLU MLP, built from torch::nn modules and
// the quantized linear layer of qlinear.hpp.
//
// Every linear layer is an *operator*: the unit of precision (it runs
// quantized or promoted) and one gnmr unit (weight and bias together, two
// gnmr::Segment with the same unit index). Every other parameter tensor
// (embeddings, LayerNorm gains and biases) is a unit of its own. The
// attention products (q k^T, att v) stay in high precision, as in FP8
// recipes that quantize only the linear layers.
//
// Attention is written out (masked softmax) instead of calling
// scaled_dot_product_attention, which libtorch 1.13 lacks: the same source
// builds against Debian's libtorch 1.13 and PyTorch 2.x's libtorch.
#pragma once

#include <cmath>
#include <deque>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "qlinear.hpp"

namespace demo {

enum class Mlp : std::uint8_t { kGelu, kSwiGlu };

struct ModelConfig {
  int vocab = 0;
  int ctx = 64;
  int width = 64;
  int heads = 4;
  int layers = 2;
  Mlp mlp = Mlp::kGelu;
  // SwiGLU hidden width: 8/3 of the model width, rounded up to 16 (whole NVFP4 blocks).
  int swiglu_hidden() const { return (8 * width / 3 + 15) / 16 * 16; }
};

// The operators of a model, in forward order (names like "h0.qkv", "head").
struct OpTable {
  std::deque<OpState> ops;  // stable addresses: QLinear modules point into it
  OpState* add(const std::string& name) {
    ops.emplace_back();
    ops.back().name = name;
    ops.back().index = static_cast<int>(ops.size()) - 1;
    return &ops.back();
  }
};

struct BlockImpl : torch::nn::Module {
  BlockImpl(const ModelConfig& c, const std::string& pfx, OpTable& t, QuantContext* qc)
      : heads(c.heads), mlp(c.mlp) {
    const int hid = c.mlp == Mlp::kSwiGlu ? c.swiglu_hidden() : 4 * c.width;
    ln1 = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.width})));
    qkv = register_module("qkv", QLinear(c.width, 3 * c.width, t.add(pfx + ".qkv"), qc));
    proj = register_module("proj", QLinear(c.width, c.width, t.add(pfx + ".proj"), qc));
    ln2 = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.width})));
    if (mlp == Mlp::kSwiGlu) {
      gate = register_module("gate", QLinear(c.width, hid, t.add(pfx + ".gate"), qc));
      up = register_module("up", QLinear(c.width, hid, t.add(pfx + ".up"), qc));
      down = register_module("down", QLinear(hid, c.width, t.add(pfx + ".down"), qc));
    } else {
      fc = register_module("fc", QLinear(c.width, hid, t.add(pfx + ".fc"), qc));
      out = register_module("out", QLinear(hid, c.width, t.add(pfx + ".out"), qc));
    }
  }

  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& mask) {
    const auto B = x.size(0), T = x.size(1), C = x.size(2), hd = C / heads;
    auto qkv_ = qkv->forward(ln1->forward(x)).view({B, T, 3, heads, hd}).permute({2, 0, 3, 1, 4});
    auto q = qkv_[0], k = qkv_[1], v = qkv_[2];  // [B, H, T, hd]
    auto att = torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(hd)));
    att = torch::softmax(att.masked_fill(mask, -INFINITY), -1);
    auto y = torch::matmul(att, v).transpose(1, 2).contiguous().view({B, T, C});
    auto h = x + proj->forward(y);
    const auto z = ln2->forward(h);
    if (mlp == Mlp::kSwiGlu) return h + down->forward(torch::silu(gate->forward(z)) * up->forward(z));
    return h + out->forward(torch::gelu(fc->forward(z)));
  }

  int heads;
  Mlp mlp;
  torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  QLinear qkv{nullptr}, proj{nullptr}, fc{nullptr}, out{nullptr}, gate{nullptr}, up{nullptr}, down{nullptr};
};
TORCH_MODULE(Block);

struct GptImpl : torch::nn::Module {
  GptImpl(const ModelConfig& c, OpTable& t, QuantContext* qc) {
    if (c.width % c.heads != 0) throw std::invalid_argument("--width must be a multiple of 4");
    tok = register_module("tok", torch::nn::Embedding(c.vocab, c.width));
    pos = register_module("pos", torch::nn::Embedding(c.ctx, c.width));
    for (int l = 0; l < c.layers; ++l) {
      const std::string pfx = "h" + std::to_string(l);
      blocks.push_back(register_module(pfx, Block(c, pfx, t, qc)));
    }
    lnf = register_module("lnf", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.width})));
    head = register_module("head", QLinear(c.width, c.vocab, t.add("head"), qc));
    // GPT-2 init: N(0, 0.02), residual projections scaled by 1/sqrt(2L).
    torch::NoGradGuard ng;
    for (auto& p : named_parameters()) {
      const auto& n = p.key();
      auto& w = p.value();
      if (n.find("ln") != std::string::npos) continue;  // LayerNorm: ones/zeros
      if (n.size() >= 4 && n.compare(n.size() - 4, 4, "bias") == 0) {
        w.zero_();
      } else {
        const bool resid = n.find("proj") != std::string::npos || n.find(".out.") != std::string::npos ||
                           n.find(".down.") != std::string::npos;
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

// The gnmr units of a model: parameter tensors in named_parameters() order,
// an operator's weight and bias sharing one unit (named after the operator).
struct UnitMap {
  std::vector<std::string> unit_names;
  std::vector<std::uint32_t> unit_of_tensor;  // [tensor]
  std::vector<int> op_of_unit;                // [unit]: operator index, -1 if none
  std::vector<std::uint32_t> unit_of_op;      // [op]
};

inline UnitMap unit_map(const std::vector<std::string>& tensor_names, const OpTable& t) {
  UnitMap m;
  m.unit_of_op.assign(t.ops.size(), 0);
  for (const auto& name : tensor_names) {
    const auto dot = name.rfind('.');
    const std::string owner = name.substr(0, dot == std::string::npos ? 0 : dot);
    int op = -1;
    for (const auto& o : t.ops)
      if (o.name == owner) op = o.index;
    std::uint32_t unit = static_cast<std::uint32_t>(m.unit_names.size());
    bool seen = false;
    if (op >= 0)
      for (std::size_t u = 0; u < m.op_of_unit.size(); ++u)
        if (m.op_of_unit[u] == op) unit = static_cast<std::uint32_t>(u), seen = true;
    if (!seen) {
      m.unit_names.push_back(op >= 0 ? owner : name);
      m.op_of_unit.push_back(op);
      if (op >= 0) m.unit_of_op[static_cast<std::size_t>(op)] = unit;
    }
    m.unit_of_tensor.push_back(unit);
  }
  return m;
}

}  // namespace demo
