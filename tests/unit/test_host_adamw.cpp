// The public host optimizer gnmr::HostAdamW (gnmr/host/adamw.hpp): the same
// bits as the replay the CUDA kernel is tested against (adamw_step_host), a
// bad call that changes nothing, the unit-state checkpoint round trip, and
// no allocation per step. The arithmetic itself is checked against a double
// AdamW in test_cuda_logic_adamw.cpp.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

#include "gnmr/host/adamw.hpp"
#include "gnmr/plan/adamw_plan.hpp"
#include "../support/alloc_counter.hpp"

namespace {

// Two tensors of unit 0 (one without weight decay) and one of unit 2; unit 1
// has no tensor. Random data from a fixed seed.
struct Model {
  std::vector<float> p[3], g[3], m[3], v[3];
  explicit Model(unsigned seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, 1.0f);
    const std::size_t n[3] = {1000, 37, 70000};
    for (int k = 0; k < 3; ++k) {
      for (auto* x : {&p[k], &g[k], &m[k], &v[k]}) x->resize(n[k]);
      for (std::size_t i = 0; i < n[k]; ++i) {
        p[k][i] = d(rng);
        g[k][i] = d(rng);
        m[k][i] = 0.1f * d(rng);
        v[k][i] = std::fabs(0.01f * d(rng));
      }
    }
  }
  std::vector<gnmr::AdamWTensor> tensors() {
    const std::uint32_t unit[3] = {0, 0, 2};
    std::vector<gnmr::AdamWTensor> t;
    for (int k = 0; k < 3; ++k)
      t.push_back({p[k].data(), g[k].data(), m[k].data(), v[k].data(), p[k].size(), gnmr::DType::kF32,
                   unit[k], k != 1});
    return t;
  }
  bool same_bits(const Model& o) const {
    for (int k = 0; k < 3; ++k)
      for (const auto& pr : {std::make_pair(&p[k], &o.p[k]), std::make_pair(&m[k], &o.m[k]),
                             std::make_pair(&v[k], &o.v[k])})
        if (std::memcmp(pr.first->data(), pr.second->data(), pr.first->size() * sizeof(float)) != 0)
          return false;
    return true;
  }
};

gnmr::AdamWParams hyper() {
  gnmr::AdamWParams h;
  h.lr = 3e-3f;
  h.weight_decay = 0.1f;
  return h;
}

}  // namespace

TEST_CASE("HostAdamW writes what adamw_step_host writes, step by step", "[adamw][host]") {
  Model a(7), b(7);
  const auto ta = a.tensors();
  const auto tb = b.tensors();
  gnmr::HostAdamW opt(3);
  opt.set_tensors(ta.data(), ta.size());
  const auto L = gnmr::detail::build_adamw_layout(tb.data(), tb.size(), 3);
  std::vector<gnmr::AdamWUnitState> st(3, gnmr::detail::adamw_unit_init());
  // A clip, a skip, a moment reset and plain steps across five steps.
  const std::vector<std::vector<gnmr::UnitDecision>> steps = {
      {{1.0f, 0u}, {1.0f, 0u}, {1.0f, 0u}},
      {{0.25f, gnmr::kInRecovery}, {1.0f, 0u}, {1.0f, gnmr::kSkip}},
      {{1.0f, gnmr::kResetMoments}, {1.0f, 0u}, {0.5f, gnmr::kInRecovery}},
      {{1.0f, 0u}, {1.0f, 0u}, {1.0f, 0u}},
      {{1.0f, gnmr::kSkip}, {1.0f, 0u}, {1.0f, 0u}}};
  for (const auto& d : steps) {
    opt.step(hyper(), hyper().lr, d.data());
    gnmr::adamw_step_host(L, hyper(), hyper().lr, d.data(), st);
    REQUIRE(a.same_bits(b));
  }
  for (std::size_t u = 0; u < 3; ++u) {
    CHECK(opt.unit_states()[u].step == st[u].step);
    CHECK(opt.unit_states()[u].beta1_pow == st[u].beta1_pow);
  }
  CHECK(opt.unit_states()[0].step == 2);  // reset at step 3 restarts at 1, skip at 5 does not advance
  CHECK(opt.unit_states()[1].step == 0);  // no tensor: never touched
  CHECK(opt.unit_states()[2].step == 4);
  // A suggested global skip moves nothing, states included.
  const Model before = a;
  const auto s0 = opt.unit_states();
  opt.step(hyper(), hyper().lr, steps[0].data(), /*global_skip=*/true);
  CHECK(a.same_bits(before));
  CHECK(opt.unit_states()[2].step == s0[2].step);
}

TEST_CASE("HostAdamW: a bad call throws and changes nothing", "[adamw][host][validation]") {
  Model a(3);
  const Model before = a;
  const auto t = a.tensors();
  gnmr::HostAdamW opt(3);
  opt.set_tensors(t.data(), t.size());
  gnmr::AdamWParams bad = hyper();
  bad.beta2 = 1.0f;
  CHECK_THROWS_AS(opt.step(bad, bad.lr, nullptr), std::invalid_argument);
  CHECK(a.same_bits(before));
  CHECK(opt.unit_states()[0].step == 0);
  auto wrong_unit = t;
  wrong_unit[2].unit = 3;
  CHECK_THROWS_AS(opt.set_tensors(wrong_unit.data(), wrong_unit.size()), std::invalid_argument);
  CHECK_THROWS_AS(opt.set_unit_states(std::vector<gnmr::AdamWUnitState>(2)), std::invalid_argument);
  CHECK_THROWS_AS(gnmr::HostAdamW(0), std::invalid_argument);
  std::vector<gnmr::AdamWUnitState> short_states(2);
  const auto L = gnmr::detail::build_adamw_layout(t.data(), t.size(), 3);
  CHECK_THROWS_AS(gnmr::adamw_step_host(L, hyper(), hyper().lr, nullptr, short_states), std::invalid_argument);
}

TEST_CASE("HostAdamW: unit states round-trip, and a restored optimizer continues bit for bit",
          "[adamw][host][state]") {
  Model a(11), b(11);
  const auto ta = a.tensors();
  const auto tb = b.tensors();
  gnmr::HostAdamW x(3), y(3);
  x.set_tensors(ta.data(), ta.size());
  y.set_tensors(tb.data(), tb.size());
  for (int i = 0; i < 3; ++i) {
    x.step(hyper(), hyper().lr, nullptr);
    y.step(hyper(), hyper().lr, nullptr);
  }
  gnmr::HostAdamW z(3);  // a restart: fresh object, the checkpointed states
  z.set_tensors(tb.data(), tb.size());
  z.set_unit_states(y.unit_states());
  x.step(hyper(), hyper().lr, nullptr);
  z.step(hyper(), hyper().lr, nullptr);
  CHECK(a.same_bits(b));
}

#if GNMR_TEST_COUNT_ALLOCS
TEST_CASE("HostAdamW::step allocates nothing", "[adamw][host][alloc]") {
  Model a(5);
  const auto t = a.tensors();
  gnmr::HostAdamW opt(3);
  opt.set_tensors(t.data(), t.size());
  const std::vector<gnmr::UnitDecision> d = {{0.5f, gnmr::kInRecovery}, {1.0f, 0u}, {1.0f, 0u}};
  const gnmr::AdamWParams h = hyper();
  alloc_counter::g_allocs = 0;
  alloc_counter::g_count_allocs = true;
  for (int i = 0; i < 4; ++i) opt.step(h, h.lr, d.data());
  alloc_counter::g_count_allocs = false;
  CHECK(alloc_counter::g_allocs == 0);
}
#endif
