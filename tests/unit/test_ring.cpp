// Tests of gnmr/detail/ring.hpp, the slot bookkeeping of
// gnmr::cuda::SummaryRing (the CUDA part is tests/cuda/test_summary_ring.cu):
// which slot a push takes, and which slot holds the newest completed copy
// when copies complete in order, out of order, or a slot is pushed again
// before its copy completed. Checked by hand and against a brute-force model
// under random completion.
#include "gnmr/detail/ring.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <stdexcept>
#include <vector>

using gnmr::detail::RingSlots;

TEST_CASE("RingSlots: fewer than two slots is an error", "[ring]") {
  CHECK_THROWS_AS(RingSlots(0), std::invalid_argument);
  CHECK_THROWS_WITH(RingSlots(1), Catch::Contains("at least 2 slots"));
  CHECK_NOTHROW(RingSlots(2));
}

TEST_CASE("RingSlots: pushes cycle through the slots, newest done wins", "[ring]") {
  RingSlots r(3);
  std::vector<int> asked;
  const auto none = [&](std::uint32_t s) {
    asked.push_back(static_cast<int>(s));
    return false;
  };
  CHECK(r.newest() == -1);
  CHECK(r.newest_done(none) == -1);
  CHECK(asked.empty());  // never asks about a slot nothing was pushed to
  CHECK(r.take() == 0u);
  CHECK(r.take() == 1u);
  CHECK(r.pushed() == 2u);
  CHECK(r.newest() == 1);
  CHECK(r.newest_done(none) == -1);
  CHECK(asked == std::vector<int>{0, 1});
  const auto all = [](std::uint32_t) { return true; };
  CHECK(r.newest_done(all) == 1);
  const auto only0 = [](std::uint32_t s) { return s == 0u; };
  CHECK(r.newest_done(only0) == 0);
  CHECK(r.take() == 2u);
  CHECK(r.take() == 0u);  // wraps: slot 0 now holds push 4, not push 1
  CHECK(r.seq(0) == 4u);
  CHECK(r.seq(1) == 2u);
  CHECK(r.seq(2) == 3u);
  CHECK(r.newest() == 0);
  CHECK(r.newest_done(all) == 0);
  // Push 4 (slot 0) not done yet: push 3 (slot 2) is the newest done.
  CHECK(r.newest_done([](std::uint32_t s) { return s != 0u; }) == 2);
  // Out of order (two streams): push 2 done, push 3 not.
  CHECK(r.newest_done([](std::uint32_t s) { return s == 1u; }) == 1);
}

TEST_CASE("RingSlots: newest done matches a brute-force model", "[ring]") {
  std::mt19937_64 rng(20251123);
  for (std::uint32_t slots : {2u, 3u, 5u}) {
    RingSlots r(slots);
    std::vector<std::uint64_t> model(slots, 0);  // push number held by each slot
    for (std::uint64_t push = 1; push <= 500; ++push) {
      const std::uint32_t s = r.take();
      REQUIRE(s == (push - 1) % slots);
      model[s] = push;
      std::vector<bool> done(slots);
      for (std::uint32_t i = 0; i < slots; ++i) done[i] = (rng() % 3) != 0;
      int want = -1;
      std::uint64_t best = 0;
      for (std::uint32_t i = 0; i < slots; ++i)
        if (model[i] != 0 && done[i] && model[i] > best) {
          best = model[i];
          want = static_cast<int>(i);
        }
      REQUIRE(r.newest_done([&](std::uint32_t i) { return static_cast<bool>(done[i]); }) == want);
      REQUIRE(r.newest() == static_cast<int>(s));
    }
  }
}

// SummaryRing::push forgets the slot of a push that failed: an old value
// under the new push's number, or a copy enqueued without its event, must
// not be what latest()/wait_newest() return.
TEST_CASE("RingSlots: a forgotten slot is never the newest, until taken again", "[ring]") {
  RingSlots r(3);
  const auto all = [](std::uint32_t) { return true; };
  CHECK(r.take() == 0u);
  CHECK(r.take() == 1u);
  r.forget(1);  // push 2 failed
  CHECK(r.seq(1) == RingSlots::kNever);
  CHECK(r.newest() == 0);
  std::vector<int> asked;
  CHECK(r.newest_done([&](std::uint32_t s) {
    asked.push_back(static_cast<int>(s));
    return true;
  }) == 0);
  CHECK(asked == std::vector<int>{0});  // the forgotten slot's event is not even asked
  CHECK(r.take() == 2u);                // the next push goes on in order
  CHECK(r.newest() == 2);
  CHECK(r.take() == 0u);
  r.forget(0);  // push 4 failed: slot 0 held push 1, which must not come back
  CHECK(r.newest() == 2);
  CHECK(r.newest_done(all) == 2);
  CHECK(r.take() == 1u);  // slot 1 reused by push 5
  CHECK(r.newest() == 1);
  CHECK(r.newest_done(all) == 1);
  RingSlots q(2);
  q.forget(q.take());  // the only push failed
  CHECK(q.newest() == -1);
  CHECK(q.newest_done(all) == -1);
  CHECK(q.pushed() == 1u);
}
