// Negative compile test: a TriggerPolicy without check(). Before
// gnmr/policy/interface.hpp this was a 600-character error about an
// initializer list in GnmrController's constructor; now the first error
// names the member. -DGNMR_CF_FIXED adds it (the control compile).
#include <gnmr/gnmr.hpp>

struct MyTrigger {
  static constexpr const char* kName = "my_trigger";
  float tau = 3.0f;
  struct State {};
  GNMR_HOST_DEVICE static State init() { return State{}; }
  GNMR_HOST_DEVICE void evaluate(const State&, gnmr::UnitView& v) const {
    v.delta = 0.0f;
    v.target = v.mean;
    v.risk = gnmr::math::div(v.ratio, tau);
    if (v.ratio > tau) v.flags |= gnmr::kTriggered;
  }
  GNMR_HOST_DEVICE float feed(const gnmr::UnitView& v) const { return v.norm; }
  GNMR_HOST_DEVICE void update(State&, const gnmr::UnitView&) const {}
#ifdef GNMR_CF_FIXED
  std::string check() const { return {}; }
#endif
};

int main() {
  gnmr::GnmrController<gnmr::L2Norm, gnmr::EmaMean, MyTrigger> c(4);
  return c.step_norms(std::vector<float>(4, 1.0f)).triggered == 0 ? 0 : 1;
}
