// Negative compile test: a TriggerPolicy whose evaluate() lacks
// GNMR_HOST_DEVICE, used in DeviceController. Before
// gnmr/cuda/policy_check.cuh nvcc only warned (#20011-D) and the kernel
// failed at run time; now it is an error whose text says what to add.
// gnmr.hpp first, as a user would: the check must not depend on the
// include order.
#include <gnmr/cuda/controller.cuh>
#include <gnmr/gnmr.hpp>

#ifdef GNMR_CF_FIXED
#define MAYBE_HD GNMR_HOST_DEVICE
#else
#define MAYBE_HD
#endif

struct MyTrigger {
  static constexpr const char* kName = "my_trigger";
  float tau = 3.0f;
  struct State {};
  GNMR_HOST_DEVICE static State init() { return State{}; }
  MAYBE_HD void evaluate(const State&, gnmr::UnitView& v) const {
    v.delta = 0.0f;
    v.target = v.mean;
    v.risk = gnmr::math::div(v.ratio, tau);
    if (v.ratio > tau) v.flags |= gnmr::kTriggered;
  }
  GNMR_HOST_DEVICE float feed(const gnmr::UnitView& v) const { return v.norm; }
  GNMR_HOST_DEVICE void update(State&, const gnmr::UnitView&) const {}
  std::string check() const { return {}; }
};

int main() {
  gnmr::cuda::DeviceController<gnmr::L2Norm, gnmr::EmaMean, MyTrigger> c(4);
  return static_cast<int>(c.num_units()) - 4;
}
