// gnmr_jax's CPU step (python-jax/gnmr_jax/csrc/host_step.hpp, the body of
// its XLA handler) against a plain controller that loads, steps and saves:
// a loop (the blob fed back, the load skipped), a restore of an older blob,
// two states interleaved through one slot, separate input and output
// buffers, a corrupted blob and another configuration's blob (refused, the
// slot unchanged). Its allocation count: tests/unit/test_alloc.cpp.
#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <vector>

#include "../../python-jax/gnmr_jax/csrc/host_step.hpp"
#include "../support/make_once.hpp"

namespace {

struct Out {
  explicit Out(std::size_t n) : scale(n), flags(n) {}
  std::vector<float> scale;
  std::vector<std::uint32_t> flags;
  std::int32_t counts[gnmr_jax::kCounts];
  float values[gnmr_jax::kValues];
};

std::vector<float> partials_at(int t, std::size_t n) {
  std::vector<float> p(n);
  for (std::size_t i = 0; i < n; ++i) {
    float v = 1.0f + 0.01f * static_cast<float>((i * 5 + static_cast<std::size_t>(t)) % 11);
    if (t > 20 && t % 7 == 0 && i % 4 == 0) v *= 30.0f;
    if (t % 19 == 0 && i == 3) v = std::numeric_limits<float>::quiet_NaN();
    p[i] = v * v;
  }
  return p;
}

void same(const gnmr::DynController& ref, const Out& o) {
  for (std::size_t u = 0; u < o.scale.size(); ++u) {
    REQUIRE(o.scale[u] == ref.decisions()[u].scale);
    REQUIRE(o.flags[u] == ref.decisions()[u].flags);
  }
  REQUIRE(o.counts[0] == static_cast<std::int32_t>(ref.summary().step));
}

}  // namespace

TEST_CASE("gnmr_jax's host step decides as load, step, save", "[jax][state]") {
  const std::size_t n = 12;
  gnmr_jax::HostSlot slot(gnmr_test::make_default(n));
  auto ref = gnmr_test::make_default(n);
  std::vector<std::uint8_t> state = slot.last, kept;
  Out o(n);
  for (int t = 1; t <= 80; ++t) {
    const auto p = partials_at(t, n);
    if (t == 30) kept = state;
    gnmr_jax::host_step(slot, p.data(), n, state.data(), state.data(), state.size(), o.scale.data(), o.flags.data(),
                        o.counts, o.values);
    ref->step(p.data(), n);
    REQUIRE(ref->save() == state);
    same(*ref, o);
  }
  // A restore of step 29's blob, into separate output buffers.
  ref->load(kept);
  std::vector<std::uint8_t> in = kept, out(kept.size(), 0xEEu);
  for (int t = 30; t <= 50; ++t) {
    const auto p = partials_at(t, n);
    gnmr_jax::host_step(slot, p.data(), n, in.data(), out.data(), in.size(), o.scale.data(), o.flags.data(),
                        o.counts, o.values);
    ref->step(p.data(), n);
    REQUIRE(ref->save() == out);
    same(*ref, o);
    in.swap(out);
  }
  state = in;
  // Two states interleaved through the one slot: each as if alone.
  auto ra = gnmr_test::make_default(n), rb = gnmr_test::make_default(n);
  std::vector<std::uint8_t> a = ra->save(), b = rb->save();
  for (int t = 1; t <= 30; ++t) {
    const auto pa = partials_at(t, n), pb = partials_at(t + 100, n);
    gnmr_jax::host_step(slot, pa.data(), n, a.data(), a.data(), a.size(), o.scale.data(), o.flags.data(), o.counts,
                        o.values);
    ra->step(pa.data(), n);
    same(*ra, o);
    gnmr_jax::host_step(slot, pb.data(), n, b.data(), b.data(), b.size(), o.scale.data(), o.flags.data(), o.counts,
                        o.values);
    rb->step(pb.data(), n);
    same(*rb, o);
  }
  CHECK(ra->save() == a);
  CHECK(rb->save() == b);
  // A corrupted blob and another configuration's: refused with the
  // library's message, the slot unchanged (the next good step goes on).
  std::vector<std::uint8_t> bad = b;
  bad[bad.size() / 2] ^= 0x10u;
  CHECK_THROWS_WITH(gnmr_jax::host_step(slot, partials_at(31, n).data(), n, bad.data(), bad.data(), bad.size(),
                                        o.scale.data(), o.flags.data(), o.counts, o.values),
                    Catch::Contains("checksum"));
  std::vector<std::uint8_t> other = gnmr_test::make("gnmr", n)->save();
  CHECK_THROWS_AS(gnmr_jax::host_step(slot, partials_at(31, n).data(), n, other.data(), other.data(), other.size(),
                                      o.scale.data(), o.flags.data(), o.counts, o.values),
                  gnmr::StateError);
  const auto p = partials_at(31, n);
  gnmr_jax::host_step(slot, p.data(), n, b.data(), b.data(), b.size(), o.scale.data(), o.flags.data(), o.counts,
                      o.values);
  rb->step(p.data(), n);
  CHECK(rb->save() == b);
}
