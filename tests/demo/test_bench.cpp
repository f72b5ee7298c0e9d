// tests/demo/test_bench.cpp — the benchmark's bookkeeping, on hand-made
// inputs (CTest gnmr_demo_tests, label demo): promotion sources and the
// random / fixed-list tables, the recipe's clip, the metrics (shares, spike
// score, detection), the outlier schedule, the unit map and the cache key.
#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include <torch/torch.h>

#include "metrics.hpp"
#include "runio.hpp"
#include "suite.hpp"

// c10 defines a CHECK macro of its own: Catch's go by their prefixed names.
#define CATCH_CONFIG_PREFIX_ALL
#include <catch2/catch.hpp>

using gnmr::UnitDecision;

CATCH_TEST_CASE("promotion sources", "[demo][bench]") {
  // units 0..3; units 1 and 3 are operators 0 and 1, units 0 and 2 are not.
  const std::vector<std::int32_t> op_of_unit = {-1, 0, -1, 1};
  std::vector<UnitDecision> d(4, UnitDecision{1.0f, 0u});
  std::vector<std::int32_t> redirect(4, -1);
  std::vector<std::uint8_t> mask(2, 7);
  d[0].flags = gnmr::kPromote | gnmr::kGranted | gnmr::kInRecovery;  // not an operator: nothing
  d[3].flags = gnmr::kPromote | gnmr::kInRecovery;
  demo::next_promoted(demo::PromoteFrom::kController, d.data(), op_of_unit.data(), 4, 2, 5, 1, redirect.data(),
                      nullptr, mask.data());
  CATCH_CHECK(mask == std::vector<std::uint8_t>{0, 1});
  demo::next_promoted(demo::PromoteFrom::kNone, d.data(), op_of_unit.data(), 4, 2, 5, 1, redirect.data(), nullptr,
                      mask.data());
  CATCH_CHECK(mask == std::vector<std::uint8_t>{0, 0});
  const std::vector<std::uint8_t> row = {1, 0};
  demo::next_promoted(demo::PromoteFrom::kTable, d.data(), op_of_unit.data(), 4, 2, 5, 1, redirect.data(),
                      row.data(), mask.data());
  CATCH_CHECK(mask == row);

  // Redirect: a grant draws the target; the lock keeps it; no grant, no target.
  std::vector<std::int32_t> r(4, -1);
  d[3].flags = gnmr::kPromote | gnmr::kInRecovery;  // in recovery, never granted here
  demo::next_promoted(demo::PromoteFrom::kRedirect, d.data(), op_of_unit.data(), 4, 2, 5, 9, r.data(), nullptr,
                      mask.data());
  CATCH_CHECK(mask == std::vector<std::uint8_t>{0, 0});
  d[3].flags |= gnmr::kGranted;
  demo::next_promoted(demo::PromoteFrom::kRedirect, d.data(), op_of_unit.data(), 4, 2, 6, 9, r.data(), nullptr,
                      mask.data());
  CATCH_REQUIRE(r[3] >= 0);
  CATCH_CHECK(r[3] < 2);
  CATCH_CHECK(r[0] == -1);  // the non-operator grant is not redirected
  const std::int32_t target = r[3];
  CATCH_CHECK(mask[static_cast<std::size_t>(target)] == 1);
  CATCH_CHECK(mask[static_cast<std::size_t>(1 - target)] == 0);
  d[3].flags = gnmr::kPromote | gnmr::kInRecovery;
  demo::next_promoted(demo::PromoteFrom::kRedirect, d.data(), op_of_unit.data(), 4, 2, 7, 9, r.data(), nullptr,
                      mask.data());
  CATCH_CHECK(r[3] == target);
  CATCH_CHECK(mask[static_cast<std::size_t>(target)] == 1);
  // The draw is uniform-ish over operators: many grants hit both.
  std::set<std::int32_t> seen;
  d[3].flags |= gnmr::kGranted;
  for (int t = 0; t < 64; ++t) {
    demo::next_promoted(demo::PromoteFrom::kRedirect, d.data(), op_of_unit.data(), 4, 2, t, 9, r.data(), nullptr,
                        mask.data());
    seen.insert(r[3]);
  }
  CATCH_CHECK(seen.size() == 2);
}

CATCH_TEST_CASE("random and fixed-list tables", "[demo][bench]") {
  std::vector<std::vector<std::uint8_t>> masks(10, std::vector<std::uint8_t>(3, 0));
  for (int t : {2, 3, 4}) masks[static_cast<std::size_t>(t - 1)][1] = 1;  // op 1 at steps 2..4
  for (int t : {9, 10}) masks[static_cast<std::size_t>(t - 1)][1] = 1;    // op 1 at steps 9..10
  masks[4][0] = 1;                                                        // op 0 at step 5
  const auto ev = demo::episodes_of(masks);
  CATCH_REQUIRE(ev.size() == 3);
  CATCH_CHECK((ev[0].op == 0 && ev[0].start == 5 && ev[0].len == 1));
  CATCH_CHECK((ev[1].op == 1 && ev[1].start == 2 && ev[1].len == 3));
  CATCH_CHECK((ev[2].op == 1 && ev[2].start == 9 && ev[2].len == 2));
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    const auto t = demo::random_table(ev, 3, 10, seed);
    int total = 0;
    for (std::size_t s = 1; s < t.size(); ++s)
      for (auto v : t[s]) total += v;
    CATCH_CHECK(total == 6);  // exactly the source's operator-steps
    for (auto v : t[0]) CATCH_CHECK(v == 0);
    std::vector<std::vector<std::uint8_t>> rows(t.begin() + 1, t.end());
    int lens = 0;
    for (const auto& e : demo::episodes_of(rows)) lens += e.len;
    CATCH_CHECK(lens == 6);
  }
  CATCH_CHECK(demo::fixed_list_count(0.0, 21) == 1);
  CATCH_CHECK(demo::fixed_list_count(0.03, 21) == 1);   // 1/21 = 0.048 nearest
  CATCH_CHECK(demo::fixed_list_count(0.08, 21) == 2);   // 2/21 = 0.095 vs 1/21 = 0.048
  CATCH_CHECK(demo::fixed_list_count(0.45, 21) == 9);   // 9/21 = 0.429 vs 10/21 = 0.476
  const auto f = demo::fixed_table(2, 5, 3);
  CATCH_CHECK(f.size() == 4);
  CATCH_CHECK(f[2] == std::vector<std::uint8_t>{0, 0, 0, 1, 1});  // the last two in forward order
  // A pinned last operator (the NVFP4 recipe's head) is skipped, not counted.
  CATCH_CHECK(demo::fixed_table(2, 5, 1, {1, 1, 1, 1, 0})[1] == std::vector<std::uint8_t>{0, 0, 1, 1, 0});
}

CATCH_TEST_CASE("the recipe's clip after the rule", "[demo][bench]") {
  // partials (sums of squares) 9, 16, 144: total 13 with scales 1; unit 2 skipped.
  const float p[3] = {9.0f, 16.0f, 144.0f};
  UnitDecision in[3] = {{1.0f, 0u}, {0.5f, gnmr::kInRecovery}, {0.0f, gnmr::kSkip}};
  UnitDecision out[3];
  float total = 0;
  // total = sqrt(9 + 0.25 * 16) = sqrt(13) = 3.6056: clipped to 1
  const float c = demo::recipe_clip(in, p, 3, 1.0f, out, &total);
  CATCH_CHECK(total == static_cast<float>(std::sqrt(13.0)));
  CATCH_CHECK(c == static_cast<float>(1.0 / (std::sqrt(13.0) + 1e-6)));
  CATCH_CHECK(out[0].scale == c);
  CATCH_CHECK(out[1].scale == 0.5f * c);
  CATCH_CHECK(out[1].flags == gnmr::kInRecovery);
  CATCH_CHECK((out[2].scale == 0.0f && out[2].flags == gnmr::kSkip));  // a skip stays a select
  CATCH_CHECK(demo::recipe_clip(in, p, 3, 5.0f, out, &total) == 1.0f);  // within the clip
  CATCH_CHECK(out[1].scale == 0.5f);
  CATCH_CHECK(demo::recipe_clip(in, p, 3, 0.0f, out, &total) == 1.0f);  // no recipe clip
  CATCH_CHECK(demo::global_partial(p, 3) == 169.0f);
}

namespace {
demo::RunResult toy_run() {
  demo::RunResult r;
  r.initial_loss = 4.0;
  r.controller_units = 4;
  r.op_weight = {1.0, 3.0};
  for (int s = 1; s <= 100; ++s) {
    demo::StepRow row;
    row.step = s;
    row.train_loss = 3.0 + 0.01 * ((s * 7) % 5);  // a small, regular wiggle
    row.in_recovery = s <= 10 ? 2 : 0;
    r.rows.push_back(row);
    r.masks.push_back({static_cast<std::uint8_t>(s <= 20), 0});  // op 0 high for 20 steps
  }
  r.rows[79].train_loss = 9.0;  // step 80: a spike by both definitions
  r.truth = {{30, 2, 1}, {60, 1, 3}};
  r.acts = {{31, 1}, {33, 1}, {40, 2}, {64, 3}};  // detects event 1 (twice); 64 > 60 + 3 misses event 2
  return r;
}
}  // namespace

CATCH_TEST_CASE("metrics of a hand-made run", "[demo][bench]") {
  const demo::Metrics m = demo::metrics_of(toy_run(), 3, true);
  CATCH_CHECK(m.hp_share == 20.0 / 200.0);
  CATCH_CHECK(m.hp_flops_share == 20.0 * 1.0 / (100.0 * 4.0));
  CATCH_CHECK(m.promoted_op_steps == 20);
  CATCH_CHECK(m.recovered_fraction == 20.0 / 400.0);
  CATCH_CHECK(m.max_in_recovery == 2u);
  CATCH_CHECK(m.spikes == 1);
  CATCH_CHECK(m.spike_score == 100.0 / 50.0);  // 1 of the 50 scored steps (51..100)
  CATCH_CHECK(!m.diverged);  // one step above 2 x 4 is a spike
  CATCH_CHECK(!demo::diverged_of({4, 9, 9, 9, 9, 9, 9, 9, 9, 9, 3}));   // 9 steps above 8
  CATCH_CHECK(demo::diverged_of({4, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 3}));  // 10 steps above 8
  CATCH_CHECK(demo::diverged_of({4, 3, NAN}));
  CATCH_CHECK(m.detect_recall == 0.5);
  CATCH_CHECK(m.detect_precision == 0.5);  // acts at 31 and 33 detect; 40 and 64 do not
  const demo::Metrics n = demo::metrics_of(toy_run(), 4, true);
  CATCH_CHECK(n.detect_recall == 1.0);  // k = 4 reaches step 64
  CATCH_CHECK(n.detect_precision == 0.75);
  CATCH_CHECK(std::isnan(demo::metrics_of(toy_run(), 3, false).detect_recall));
}

CATCH_TEST_CASE("a pinned operator (weight 0) is neither promoted nor counted", "[demo][bench]") {
  demo::RunResult r;
  r.op_weight = {2.0, 2.0, 0.0};  // the third: the recipe's head, never quantized
  r.masks = {{1, 0, 1}, {0, 0, 1}, {1, 1, 1}, {0, 0, 1}};
  const demo::Metrics m = demo::metrics_of(r, 3, false);
  CATCH_CHECK(m.promoted_op_steps == 3);
  CATCH_CHECK(m.hp_share == 3.0 / (4.0 * 2.0));
  CATCH_CHECK(m.hp_flops_share == 6.0 / (4.0 * 4.0));
}

CATCH_TEST_CASE("outlier schedule", "[demo][bench]") {
  demo::OutlierConfig c;
  c.per_100 = 4;
  const std::vector<std::int64_t> in = {64, 64, 176, 64};
  const auto ev = demo::outlier_schedule(c, 300, in, 3);
  CATCH_REQUIRE(ev.size() == 12);
  std::set<int> starts;
  for (std::size_t i = 0; i < ev.size(); ++i) {
    const auto& e = ev[i];
    starts.insert(e.start);
    CATCH_CHECK((e.start >= 30 && e.start + e.len - 1 <= 300));
    CATCH_CHECK((e.len >= 1 && e.len <= 5));
    CATCH_CHECK((e.factor >= 50 && e.factor <= 500));
    CATCH_CHECK(e.channels.size() == 4u);
    CATCH_CHECK(std::set<std::int64_t>(e.channels.begin(), e.channels.end()).size() == 4u);
    for (std::size_t j = 0; j < i; ++j)  // never two events on one operator at once
      if (ev[j].op == e.op) CATCH_CHECK((e.start >= ev[j].start + ev[j].len || ev[j].start >= e.start + e.len));
  }
  CATCH_CHECK(starts.size() == ev.size());
  const auto g = demo::outlier_gain(ev, ev[0].op, in[static_cast<std::size_t>(ev[0].op)], ev[0].start, torch::kCPU);
  CATCH_REQUIRE(g.defined());
  CATCH_CHECK(g.sum().item<double>() == Approx(in[static_cast<std::size_t>(ev[0].op)] - 4 + 4 * ev[0].factor).epsilon(1e-6));
  CATCH_CHECK(!demo::outlier_gain(ev, ev[0].op, 64, ev[0].start + ev[0].len, torch::kCPU).defined());
  CATCH_CHECK(demo::outlier_schedule(c, 300, in, 3)[5].start == ev[5].start);  // seeded
}

CATCH_TEST_CASE("operator units and the cache key", "[demo][bench]") {
  demo::OpTable t;
  t.add("h0.qkv");
  t.add("head");
  const auto m = demo::unit_map({"tok.weight", "h0.ln1.weight", "h0.qkv.weight", "h0.qkv.bias", "head.weight",
                                 "head.bias"},
                                t);
  CATCH_CHECK(m.unit_names == std::vector<std::string>{"tok.weight", "h0.ln1.weight", "h0.qkv", "head"});
  CATCH_CHECK(m.unit_of_tensor == std::vector<std::uint32_t>{0, 1, 2, 2, 3, 3});
  CATCH_CHECK(m.op_of_unit == std::vector<int>{-1, -1, 0, 1});
  CATCH_CHECK(m.unit_of_op == std::vector<std::uint32_t>{2, 3});

  // Every setting changes the key; the same config gives the same key.
  const demo::Overrides none;
  const auto base = demo::build_config("operator-outliers", "gnmr-promote", 1, none);
  CATCH_CHECK(demo::run_key(base) == demo::run_key(demo::build_config("operator-outliers", "gnmr-promote", 1, none)));
  std::set<std::string> keys = {demo::run_key(base)};
  const std::vector<std::pair<std::string, std::string>> changes = {
      {"--steps", "299"},       {"--layers", "3"},         {"--width", "48"},          {"--mlp", "gelu"},
      {"--batch", "8"},         {"--lr", "0.002"},         {"--warmup", "7"},         {"--beta2", "0.99"},        {"--recipe-clip", "0.5"},
      {"--fwd", "e5m2"},        {"--fwd-x", "none"},       {"--fwd-w", "none"},        {"--bwd", "e2m1"},
      {"--scaling", "current"}, {"--wgrad-quant", "1"},    {"--amax-history", "8"},    {"--fault-rate", "0.1"},
      {"--fault-kind", "nan"},  {"--fault-factor", "10"},  {"--outlier-rate", "3"},    {"--outlier-factor", "100"},
      {"--outlier-len", "2"},   {"--outlier-first", "40"}, {"--outlier-channels", "2"}, {"--eval-format", "train"},
      {"--detect-k", "2"},      {"--max-o", "8"},          {"--gnmr-warmup", "5"},     {"--gnmr-set", "tau=2.5"},
      {"--data", "/tmp/x"},     {"--device", "cuda"},      {"--format", "nvfp4-recipe"}, {"--head-high", "1"}};
  for (const auto& [flag, value] : changes) {
    CATCH_INFO(flag << " " << value);
    CATCH_CHECK(keys.insert(demo::run_key(demo::build_config("operator-outliers", "gnmr-promote", 1, {{flag, value}})))
                    .second);
  }
  CATCH_CHECK(changes.size() == demo::settings().size());  // a new setting needs its line here
  CATCH_CHECK(keys.insert(demo::run_key(demo::build_config("operator-outliers", "gnmr-promote", 2, none))).second);
  CATCH_CHECK(keys.insert(demo::run_key(demo::build_config("operator-outliers", "random", 1, none))).second);
  CATCH_CHECK(keys.insert(demo::run_key(demo::build_config("lr-burst", "gnmr-promote", 1, none))).second);
  CATCH_CHECK_THROWS_AS(demo::build_config("operator-outliers", "zclip", 1, {{"--bwd", "e4m3"}, {"--scaling", "block16"}}),
                        std::invalid_argument);
  // --gnmr-set goes only to the arms whose preset takes the key: rate to the
  // calibrated ones (and the default), tau to the others.
  const auto dflt = demo::build_config("operator-outliers", "default", 1, none);
  CATCH_CHECK(demo::run_key(demo::build_config("operator-outliers", "gnmr-promote", 1, {{"--gnmr-set", "rate=0.01"}})) ==
              demo::run_key(base));
  CATCH_CHECK(demo::run_key(demo::build_config("operator-outliers", "default", 1, {{"--gnmr-set", "tau=2.5"}})) ==
              demo::run_key(dflt));
  CATCH_CHECK(demo::run_key(demo::build_config("operator-outliers", "default", 1, {{"--gnmr-set", "rate=0.01"}})) !=
              demo::run_key(dflt));
  CATCH_CHECK(keys.insert(demo::run_key(demo::build_config("clean", "default", 1, none))).second);
  // The noise-floor trigger's constant is part of its key (and only of its).
  const auto nf = demo::build_config("nvfp4-recipe", "noise-floor", 1, none);
  CATCH_CHECK(demo::run_key(demo::build_config("nvfp4-recipe", "noise-floor", 1, {{"--gnmr-set", "noise_c=8"}})) !=
              demo::run_key(nf));
  CATCH_CHECK(demo::run_key(demo::build_config("nvfp4-recipe", "low", 1, {{"--gnmr-set", "noise_c=8"}})) ==
              demo::run_key(demo::build_config("nvfp4-recipe", "low", 1, none)));
  CATCH_CHECK(nf.quant.head_high);
  // A table arm's key follows its source's overrides: the random copy of a
  // noise-floor run at another budget or constant is another run.
  const auto nfr = demo::run_key(demo::build_config("nvfp4-recipe", "noise-floor-random", 1, none));
  CATCH_CHECK(demo::run_key(demo::build_config("nvfp4-recipe", "noise-floor-random", 1, {{"--max-o", "2"}})) != nfr);
  CATCH_CHECK(demo::run_key(demo::build_config("nvfp4-recipe", "noise-floor-random", 1,
                                               {{"--gnmr-set", "noise_c=12"}})) != nfr);
  CATCH_CHECK(demo::run_key(demo::build_config("operator-outliers", "random", 1, {{"--gnmr-set", "warmup=2"}})) !=
              demo::run_key(demo::build_config("operator-outliers", "random", 1, none)));
  CATCH_CHECK(demo::build_config("operator-outliers", "random", 1, none).after_overrides.empty());  // older keys kept
  CATCH_CHECK(nf.model.layers == 6);
  CATCH_CHECK_THROWS_AS(demo::build_config("no-such", "low", 1, none), std::invalid_argument);
  CATCH_CHECK_THROWS_AS(demo::build_config("lr-burst", "no-such", 1, none), std::invalid_argument);
}

CATCH_TEST_CASE("the NVFP4 comparison's tables: static layers, the late switch, random among eligible", "[demo][bench]") {
  const std::vector<std::string> ops = {"h0.qkv", "h0.down", "h1.qkv", "h1.down", "h2.qkv", "h2.down", "head"};
  const auto e = demo::ends_table(ops, 3, 4);
  CATCH_REQUIRE(e.size() == 5);
  for (std::size_t s = 1; s < e.size(); ++s) CATCH_CHECK(e[s] == std::vector<std::uint8_t>{1, 1, 0, 0, 1, 1, 0});
  // "h1." must not match "h10.": a twelve-block model's ends are h0 and h11.
  const auto e12 = demo::ends_table({"h0.up", "h1.up", "h10.up", "h11.up"}, 12, 1);
  CATCH_CHECK(e12[1] == std::vector<std::uint8_t>{1, 0, 0, 1});
  const std::vector<std::uint8_t> eligible = {1, 1, 1, 1, 1, 1, 0};  // the head pinned
  CATCH_CHECK(demo::ends_share(ops, 3, eligible) == Approx(4.0 / 6.0));
  // The late switch: every eligible operator for the last round(share * steps) steps.
  const auto l = demo::late_table(1.0 / 3.0, eligible, 10);
  CATCH_REQUIRE(l.size() == 11);
  int on = 0;
  for (int s = 1; s <= 10; ++s) {
    const bool late = s >= 8;  // round(10 / 3) = 3: steps 8, 9, 10
    CATCH_CHECK(l[static_cast<std::size_t>(s)] == (late ? eligible : std::vector<std::uint8_t>(7, 0)));
    for (auto v : l[static_cast<std::size_t>(s)]) on += v;
  }
  CATCH_CHECK(on == 18);  // 3 steps x 6 eligible operators
  // random over the eligible operators only; with all eligible, the draws
  // of the original table.
  const std::vector<demo::Episode> ev = {{0, 1, 3}, {2, 4, 2}, {5, 2, 4}, {1, 6, 1}};
  for (std::uint64_t seed = 1; seed <= 30; ++seed) {
    const auto t = demo::random_table(ev, 7, 12, seed, eligible);
    int total = 0;
    for (std::size_t s = 1; s < t.size(); ++s) {
      CATCH_CHECK(t[s][6] == 0);
      for (auto v : t[s]) total += v;
    }
    CATCH_CHECK(total == 10);
    CATCH_CHECK(demo::random_table(ev, 7, 12, seed, std::vector<std::uint8_t>(7, 1)) == demo::random_table(ev, 7, 12, seed));
  }
  CATCH_CHECK_THROWS_AS(demo::random_table(ev, 7, 12, 1, std::vector<std::uint8_t>(7, 0)), std::invalid_argument);
}
