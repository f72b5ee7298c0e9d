// python/gnmr/csrc/tables.cpp — GradTable and AdamWTable (tables.hpp).
#include "tables.hpp"

#include <ATen/core/grad_mode.h>

#include <stdexcept>
#include <utility>

namespace gnmr_py {

namespace {

bool gnmr_dtype(c10::ScalarType t, gnmr::DType& out) {
  switch (t) {
    case c10::ScalarType::Float: out = gnmr::DType::kF32; return true;
    case c10::ScalarType::BFloat16: out = gnmr::DType::kBF16; return true;
    case c10::ScalarType::Half: out = gnmr::DType::kF16; return true;
    default: return false;
  }
}

[[noreturn]] void bad(const std::string& label, const std::string& what) {
  throw std::invalid_argument("gnmr: " + label + ": " + what);
}

// A gradient gnmr can read as one flat array: strided, dense, a dtype the
// norm kernels know, on the parameter's device.
gnmr::DType check_grad(const at::Tensor& p, const at::Tensor& g, const std::string& label) {
  if (g.layout() != c10::kStrided) bad(label, "sparse gradients are not supported");
  gnmr::DType dt;
  if (!gnmr_dtype(g.scalar_type(), dt))
    bad(label, std::string("gradient dtype ") + c10::toString(g.scalar_type()) +
                   " is not supported (float32, bfloat16 or float16)");
  if (g.device() != p.device()) bad(label, "gradient is on " + g.device().str() + ", its parameter on " + p.device().str());
  if (!g.is_non_overlapping_and_dense())
    bad(label, "gradient is not dense (gnmr reads it as one array; make it contiguous)");
  return dt;
}

bool same(const gnmr::Segment& a, const gnmr::Segment& b) {
  return a.data == b.data && a.numel == b.numel && a.dtype == b.dtype && a.unit == b.unit;
}
bool same(const gnmr::AdamWTensor& a, const gnmr::AdamWTensor& b) {
  return a.param == b.param && a.grad == b.grad && a.exp_avg == b.exp_avg &&
         a.exp_avg_sq == b.exp_avg_sq && a.numel == b.numel && a.grad_dtype == b.grad_dtype &&
         a.unit == b.unit && a.weight_decay == b.weight_decay;
}
template <class T>
bool same_list(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!same(a[i], b[i])) return false;
  return true;
}

}  // namespace

// ---------------------------------------------------------------- GradTable ----
GradTable::GradTable(std::vector<at::Tensor> params, std::vector<std::uint32_t> units,
                     std::vector<std::string> labels, std::size_t num_units)
    : params_(std::move(params)), units_(std::move(units)), labels_(std::move(labels)), num_units_(num_units) {
  if (units_.size() != params_.size() || labels_.size() != params_.size())
    throw std::invalid_argument("gnmr: one unit and one label per tensor expected");
  for (std::size_t i = 0; i < units_.size(); ++i)
    if (units_[i] >= num_units_) bad(labels_[i], "unit index out of range");
  segs_.reserve(params_.size() + num_units_);
  covered_.assign(num_units_, 0);
}

namespace {
void check_count(const std::vector<at::Tensor>* grads, std::size_t n) {
  if (grads != nullptr && grads->size() != n)
    throw std::invalid_argument("gnmr: " + std::to_string(grads->size()) + " local gradients given for " +
                                std::to_string(n) + " tensors");
}
}  // namespace

bool GradTable::gather(const void* zero, const std::vector<at::Tensor>* grads) {
  check_count(grads, params_.size());
  segs_.clear();
  std::fill(covered_.begin(), covered_.end(), 0);
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const at::Tensor& g = grads ? (*grads)[i] : params_[i].grad();
    if (!g.defined()) continue;
    const gnmr::DType dt = check_grad(params_[i], g, labels_[i]);
    if (g.numel() == 0) continue;
    segs_.push_back({g.data_ptr(), static_cast<std::uint64_t>(g.numel()), dt, units_[i]});
    covered_[units_[i]] = 1;
  }
  for (std::size_t u = 0; u < num_units_; ++u)
    if (!covered_[u]) segs_.push_back({zero, 1, gnmr::DType::kF32, static_cast<std::uint32_t>(u)});
  return !same_list(segs_, planned_);
}

void GradTable::apply(const gnmr::UnitDecision* d, bool global_skip) {
  at::NoGradGuard no_grad;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const gnmr::UnitDecision u = d[units_[i]];
    at::Tensor& g = params_[i].mutable_grad();
    if (!g.defined()) continue;
    // Never a multiply by the skip's 0 scale: 0 * NaN is NaN.
    if (global_skip || (u.flags & gnmr::kSkip)) {
      g = at::Tensor();
    } else if (u.scale != 1.0f) {
      g.mul_(static_cast<double>(u.scale));
    }
  }
}

// --------------------------------------------------------------- AdamWTable ----
AdamWTable::AdamWTable(std::vector<at::Tensor> params, std::vector<std::uint32_t> units,
                       std::vector<at::Tensor> exp_avg, std::vector<at::Tensor> exp_avg_sq,
                       std::vector<std::string> labels)
    : params_(std::move(params)),
      exp_avg_(std::move(exp_avg)),
      exp_avg_sq_(std::move(exp_avg_sq)),
      units_(std::move(units)),
      labels_(std::move(labels)) {
  const std::size_t n = params_.size();
  if (units_.size() != n || exp_avg_.size() != n || exp_avg_sq_.size() != n || labels_.size() != n)
    throw std::invalid_argument("gnmr: AdamW: one unit, two moments and one label per parameter expected");
  tensors_.reserve(n);
}

bool AdamWTable::gather(const std::vector<at::Tensor>* grads) {
  check_count(grads, params_.size());
  tensors_.clear();
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const at::Tensor& p = params_[i];
    const std::string& label = labels_[i];
    if (p.scalar_type() != c10::ScalarType::Float)
      bad(label, std::string("gnmr.optim.AdamW keeps fp32 weights; this parameter is ") +
                     c10::toString(p.scalar_type()));
    if (!p.is_non_overlapping_and_dense()) bad(label, "parameter is not dense");
    for (const at::Tensor* m : {&exp_avg_[i], &exp_avg_sq_[i]})
      if (m->scalar_type() != c10::ScalarType::Float || m->device() != p.device() ||
          m->sizes() != p.sizes() || m->strides() != p.strides())
        bad(label, "optimizer state (exp_avg / exp_avg_sq) does not match the parameter "
                   "(fp32, same device, shape and strides)");
    const at::Tensor& g = grads ? (*grads)[i] : p.grad();
    if (!g.defined() || p.numel() == 0) continue;
    if (grads && g.sizes() != p.sizes()) bad(label, "local gradient shape differs from the local parameter's");
    const gnmr::DType dt = check_grad(p, g, label);
    if (g.strides() != p.strides()) bad(label, "gradient strides differ from the parameter's");
    gnmr::AdamWTensor t{};
    t.param = p.data_ptr<float>();
    t.grad = g.data_ptr();
    t.exp_avg = exp_avg_[i].data_ptr<float>();
    t.exp_avg_sq = exp_avg_sq_[i].data_ptr<float>();
    t.numel = static_cast<std::uint64_t>(p.numel());
    t.grad_dtype = dt;
    t.unit = units_[i];
    t.weight_decay = true;
    tensors_.push_back(t);
  }
  return !same_list(tensors_, planned_);
}

}  // namespace gnmr_py
