// gnmr/host/layered.hpp — LayeredController: an outer rule (global or per
// unit) and GNMR's budgeted trigger in one host step.
//
//   auto ctl = gnmr::presets::make("stabilizer+gnmr", units);   // by name, or:
//   gnmr::LayeredController ctl(gnmr::presets::make("clip", 1),
//                               gnmr::presets::make("gnmr", units));
//   ctl.step(partials, units);    // L2 partials (sums of squares), one per unit
//   ... ctl.decisions() ...       // what the optimizer applies
//
// Both controllers see the same raw partials and keep their own state; the
// per-unit combination (scales multiply or take the minimum, the outer's
// skip/reset/non-finite flags join the inner's, promotion comes from the
// inner alone) is gnmr/step/layered.hpp's, the same functors the CUDA twin
// (gnmr::cuda::LayeredDeviceController) runs. A one-unit outer is global:
// it is fed the global norm of the inner's finite per-unit norms and its
// decision applies to every unit. The inner is normally a GNMR preset (presets::make checks
// that for names); here any two DynControllers compose.
//
// Allocation: buffers are sized at construction; step() allocates nothing.
// Determinism: the outer's and the inner's own guarantees, plus a
// fixed-order sum for a global outer (detail::total_sq_tree) and integer
// flag arithmetic; the same partials give the same decisions on every run
// and on the device, and step() and step_norms() on the same norms decide
// alike.
// State: save() nests the two controllers' versioned blobs in a small
// container ("GNML", version 1); load() is all or nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "gnmr/core/math.hpp"
#include "gnmr/host/dyn_controller.hpp"
#include "gnmr/io/state.hpp"
#include "gnmr/step/layered.hpp"
#include "gnmr/step/systemic.hpp"

namespace gnmr {

namespace detail {
constexpr std::uint32_t kLayeredMagic = 0x4c4d4e47u;  // "GNML" little-endian
constexpr std::uint32_t kLayeredVersion = 1;

// "GNML" | version | outer bytes (u64) | outer blob | inner bytes (u64) | inner blob
constexpr std::size_t nested_bytes(std::size_t na, std::size_t nb) { return 8 + 8 + na + 8 + nb; }
// The container's fields around two blobs of na and nb bytes; the outer's
// goes to out + 16, the inner's to out + 24 + na.
inline void nest_fields(std::uint8_t* out, std::uint64_t na, std::uint64_t nb) {
  std::memcpy(out, &kLayeredMagic, 4);
  std::memcpy(out + 4, &kLayeredVersion, 4);
  std::memcpy(out + 8, &na, 8);
  std::memcpy(out + 16 + na, &nb, 8);
}
inline std::vector<std::uint8_t> nest_blobs(const std::vector<std::uint8_t>& a, const std::vector<std::uint8_t>& b) {
  std::vector<std::uint8_t> out(nested_bytes(a.size(), b.size()));
  nest_fields(out.data(), a.size(), b.size());
  std::memcpy(out.data() + 16, a.data(), a.size());
  std::memcpy(out.data() + 24 + a.size(), b.data(), b.size());
  return out;
}
// save_into of a pair of controllers (host or device kinds): no allocation
// where theirs make none.
template <class C>
void nest_save_into(const C& outer, const C& inner, void* out, std::size_t size, const std::string& who) {
  const std::size_t na = outer.state_bytes(), nb = inner.state_bytes();
  check_save_size(nested_bytes(na, nb), size, who);
  auto* p = static_cast<std::uint8_t*>(out);
  nest_fields(p, na, nb);
  outer.save_into(p + 16, na);
  inner.save_into(p + 24 + na, nb);
}

struct NestedBlobs {
  const std::uint8_t* outer;
  std::size_t outer_size;
  const std::uint8_t* inner;
  std::size_t inner_size;
};
inline NestedBlobs split_blobs(const void* data, std::size_t size) {
  const auto* p = static_cast<const std::uint8_t*>(data);
  if (data == nullptr || size < 16) throw StateError("gnmr: layered state: truncated blob (" + std::to_string(size) + " bytes)");
  std::uint32_t magic, version;
  std::memcpy(&magic, p, 4);
  std::memcpy(&version, p + 4, 4);
  if (magic != kLayeredMagic) throw StateError("gnmr: layered state: not a layered controller's blob (bad magic)");
  if (version != kLayeredVersion)
    throw StateError("gnmr: layered state: unsupported container version " + std::to_string(version));
  std::uint64_t na, nb;
  std::memcpy(&na, p + 8, 8);
  if (na > size - 16) throw StateError("gnmr: layered state: truncated blob (outer part)");
  if (size - 16 - na < 8) throw StateError("gnmr: layered state: truncated blob (inner size)");
  std::memcpy(&nb, p + 16 + na, 8);
  if (nb != size - 24 - na) throw StateError("gnmr: layered state: inner part's size does not match the blob");
  return {p + 16, static_cast<std::size_t>(na), p + 24 + na, static_cast<std::size_t>(nb)};
}

// What the host and device layered controllers share, over either kind of
// controller (DynController, cuda::DynDeviceController).

// Checks a pair at construction and fills in the default name; returns
// whether the outer rule is global (one unit over several). `who` names the
// class in the messages.
template <class C>
bool layered_setup(const C* outer, const C* inner, ScaleCombine combine, std::string& name, const char* who) {
  if (!outer || !inner) throw std::invalid_argument(std::string("gnmr: ") + who + ": outer and inner must be controllers");
  const std::size_t n = inner->num_units();
  if (outer->num_units() != 1 && outer->num_units() != n)
    throw std::invalid_argument(std::string("gnmr: ") + who + ": the outer rule has " +
                                std::to_string(outer->num_units()) +
                                " units; it must have 1 (global) or the inner's " + std::to_string(n));
  if (static_cast<std::uint32_t>(combine) > 1u)
    throw std::invalid_argument(std::string("gnmr: ") + who + ": combine must be product or min");
  // A per-unit outer reads the inner's raw partials: both must combine them
  // across ranks alike (a global outer is fed the finished global norm).
  if (outer->num_units() == n && outer->partial_combine() != inner->partial_combine())
    throw std::invalid_argument(std::string("gnmr: ") + who +
                                ": the outer and inner rules combine partials differently (sum and max): give "
                                "them the same norm");
  if (name.empty()) name = outer->name() + "+" + inner->name();
  return outer->num_units() == 1 && n != 1;
}

// Unit sizes: the inner's per unit; a global outer gets their total.
template <class C>
void layered_set_unit_numel(C& outer, C& inner, bool global, const std::uint64_t* numel, std::size_t n) {
  inner.set_unit_numel(numel, n);
  if (!global) return outer.set_unit_numel(numel, n);
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < n; ++i) total += numel[i];
  outer.set_unit_numel(&total, 1);
}

// All or nothing: the container is checked, then the outer loads (a bad
// blob changes nothing), then the inner; if the inner's is rejected the
// outer is put back as it was before the error is rethrown.
template <class C>
void layered_load(C& outer, C& inner, const void* data, std::size_t size, const StateLoadOptions& opt) {
  const NestedBlobs b = split_blobs(data, size);
  const std::vector<std::uint8_t> before = outer.save();
  outer.load(b.outer, b.outer_size, opt);
  try {
    inner.load(b.inner, b.inner_size, opt);
  } catch (...) {
    outer.load(before.data(), before.size(), opt);
    throw;
  }
}
}  // namespace detail

class LayeredController final : public DynController {
 public:
  // outer: 1 unit (a global rule) or as many as inner. Throws
  // std::invalid_argument for a null controller or mismatched unit counts.
  LayeredController(std::unique_ptr<DynController> outer, std::unique_ptr<DynController> inner,
                    ScaleCombine combine = ScaleCombine::kProduct, std::string name = {})
      : outer_(std::move(outer)),
        inner_(std::move(inner)),
        combine_(combine),
        name_(std::move(name)),
        global_(detail::layered_setup(outer_.get(), inner_.get(), combine_, name_, "LayeredController")) {
    const std::size_t n = inner_->num_units();
    dec_.resize(n);
    rep_.resize(n);
    scratch_.resize(detail::total_scratch_size(n) + 1);
  }

  using DynController::load;
  using DynController::set_unit_numel;
  using DynController::step;
  using DynController::step_norms;

  const StepSummary& step(const float* partials, std::size_t n) override { return run<false>(partials, n); }
  const StepSummary& step_norms(const float* norms, std::size_t n) override { return run<true>(norms, n); }

  const std::vector<UnitDecision>& decisions() const override { return dec_; }
  const std::vector<UnitReport>& reports() const override { return rep_; }
  const StepSummary& summary() const override { return sum_; }
  const std::vector<std::uint32_t>& promoted_units() const override { return inner_->promoted_units(); }
  std::size_t num_units() const override { return inner_->num_units(); }
  std::int64_t steps_done() const override { return inner_->steps_done(); }
  std::string name() const override { return name_; }
  std::uint32_t max_in_recovery() const override { return inner_->max_in_recovery(); }
  // Both rules read the same raw partials: the inner's combine (the
  // constructor checks that the outer's agrees).
  Combine partial_combine() const override { return inner_->partial_combine(); }
  ScaleCombine combine_rule() const { return combine_; }
  bool outer_is_global() const { return global_; }

  std::vector<std::uint8_t> save() const override { return detail::nest_blobs(outer_->save(), inner_->save()); }
  std::size_t state_bytes() const override {
    return detail::nested_bytes(outer_->state_bytes(), inner_->state_bytes());
  }
  void save_into(void* out, std::size_t size) const override {
    detail::nest_save_into(*outer_, *inner_, out, size, name_);
  }
  // All or nothing (detail::layered_load).
  void load(const void* data, std::size_t size, const StateLoadOptions& opt) override {
    detail::layered_load(*outer_, *inner_, data, size, opt);
  }
  void set_unit_numel(const std::uint64_t* numel, std::size_t n) override {
    check_n(n, "set_unit_numel");
    detail::layered_set_unit_numel(*outer_, *inner_, global_, numel, n);
  }
  void reset() override {
    outer_->reset();
    inner_->reset();
  }

  // The two controllers, for telemetry of each rule on its own.
  const DynController& outer() const { return *outer_; }
  const DynController& inner() const { return *inner_; }

 private:
  void check_n(std::size_t n, const char* what) const {
    if (n != inner_->num_units())
      throw std::invalid_argument(std::string("gnmr: LayeredController::") + what + ": got " + std::to_string(n) +
                                  " units, the controller has " + std::to_string(inner_->num_units()));
  }
  // The inner first; then the outer on the same input, or, when global, on
  // G = sqrt(fp32(sum of the finite n_i^2)) over the inner's finished norms
  // in total_sq_tree's order (read from its reports, no copy): the same from
  // partials and from norms, so a replay of a norm trace decides like the run.
  template <bool kNorms>
  const StepSummary& run(const float* in, std::size_t n) {
    check_n(n, kNorms ? "step_norms" : "step");
    kNorms ? inner_->step_norms(in, n) : inner_->step(in, n);
    if (global_) {
      const auto& r = inner_->reports();
      const float g = layer_global_norm(detail::tree_sum(
          n, [&r](std::size_t u) { return detail::total_square(r[u].norm); }, scratch_.data()));
      outer_->step_norms(&g, 1);
    } else {
      kNorms ? outer_->step_norms(in, n) : outer_->step(in, n);
    }
    return combine();
  }
  const StepSummary& combine() {
    const auto& od = outer_->decisions();
    const auto& id = inner_->decisions();
    const auto& ir = inner_->reports();
    for (std::size_t u = 0; u < dec_.size(); ++u) {
      dec_[u] = layer_decision(od[global_ ? 0 : u], id[u], combine_);
      rep_[u] = ir[u];
      rep_[u].scale = dec_[u].scale;
      rep_[u].flags = dec_[u].flags;
    }
    sum_ = layer_summary(outer_->summary(), inner_->summary());
    return sum_;
  }

  std::unique_ptr<DynController> outer_, inner_;
  ScaleCombine combine_;
  std::string name_;
  bool global_;  // after name_: set from the pair in the constructor's initialiser
  std::vector<UnitDecision> dec_;
  std::vector<UnitReport> rep_;
  std::vector<double> scratch_;
  StepSummary sum_{};
};

}  // namespace gnmr
