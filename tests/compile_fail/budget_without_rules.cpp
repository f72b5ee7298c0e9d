// Negative compile test: a BudgetScheduler without Rules (the lock window
// arithmetic the step asks about every unit).
#include <gnmr/gnmr.hpp>

struct TwoSlots {
  static constexpr const char* kName = "two_slots";
  std::int32_t lock = 4;
  std::int32_t cooldown = 0;
  using State = gnmr::detail::LockState;
#ifdef GNMR_CF_FIXED
  using Rules = gnmr::detail::LockRules<TwoSlots>;
#endif
  GNMR_HOST_DEVICE static State init() { return State{0}; }
  std::uint32_t slots() const { return 2u; }
  std::string check() const { return {}; }
};

int main() {
  gnmr::GnmrController<gnmr::L2Norm, gnmr::EmaMean, gnmr::GnmrTrigger, gnmr::ClipToMean, TwoSlots> c(
      4);
  return c.step_norms(std::vector<float>(4, 1.0f)).granted == 0 ? 0 : 1;
}
