// gnmr/detail/ring.hpp — the bookkeeping of a ring of readback slots, apart
// from CUDA so that the CPU tests can drive it.
//
// gnmr::cuda::SummaryRing (cuda/summary_ring.cuh) copies a device value into
// one of N pinned host slots per push and records an event per slot. Which
// slot the next push takes, and which slot holds the newest *completed*
// copy, is this class's job: the ring only asks "is slot i's copy done?".
// A slot that is pushed again before its copy completed loses that copy
// (the newer one replaces it in stream order), so the newest completed copy
// is found by sequence number, never by slot position: that also holds
// when pushes go to different streams and complete out of order.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace gnmr {
namespace detail {

class RingSlots {
 public:
  static constexpr std::uint64_t kNever = 0;  // sequence of a slot never pushed

  explicit RingSlots(std::uint32_t slots) : seq_(slots, kNever) {
    if (slots < 2)
      throw std::invalid_argument("gnmr: SummaryRing needs at least 2 slots (one being written "
                                  "while the host reads the other), got " +
                                  std::to_string(slots));
  }

  std::uint32_t size() const { return static_cast<std::uint32_t>(seq_.size()); }
  std::uint64_t pushed() const { return next_ - 1; }

  // The slot the next push writes; records it as the newest push.
  std::uint32_t take() {
    const std::uint32_t s = static_cast<std::uint32_t>((next_ - 1) % seq_.size());
    seq_[s] = next_++;
    return s;
  }

  // Sequence number (1-based push count) of what slot s holds or will hold.
  std::uint64_t seq(std::uint32_t s) const { return seq_[s]; }

  // The slot with the highest sequence among those pushed whose copy is
  // done (done(slot) -> bool, asked only for pushed slots), or -1.
  template <class Done>
  int newest_done(Done&& done) const {
    int best = -1;
    std::uint64_t best_seq = kNever;
    for (std::uint32_t s = 0; s < seq_.size(); ++s) {
      if (seq_[s] == kNever || seq_[s] <= best_seq) continue;
      if (done(s)) {
        best = static_cast<int>(s);
        best_seq = seq_[s];
      }
    }
    return best;
  }

  // A push whose copy could not be enqueued completely (SummaryRing::push
  // got an error): slot s holds nothing readable any more — neither the
  // failed copy nor, since a copy may have been enqueued without its event,
  // the older value — so neither newest_done() nor newest() returns it
  // until it is taken again.
  void forget(std::uint32_t s) { seq_[s] = kNever; }

  // The slot of the newest push that was not forgotten, or -1.
  int newest() const {
    int best = -1;
    std::uint64_t best_seq = kNever;
    for (std::uint32_t s = 0; s < seq_.size(); ++s)
      if (seq_[s] > best_seq) {
        best = static_cast<int>(s);
        best_seq = seq_[s];
      }
    return best;
  }

 private:
  std::vector<std::uint64_t> seq_;
  std::uint64_t next_ = 1;
};

}  // namespace detail
}  // namespace gnmr
