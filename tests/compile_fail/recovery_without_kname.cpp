// Negative compile test: a RecoveryAction without kName. Before
// gnmr/policy/interface.hpp this compiled and ran, and failed only at
// gnmr::save_state (the fingerprint hashes each policy's name).
#include <gnmr/gnmr.hpp>

struct HalveInRecovery {
#ifdef GNMR_CF_FIXED
  static constexpr const char* kName = "halve";
#endif
  struct State {};
  GNMR_HOST_DEVICE static State init() { return State{}; }
  GNMR_HOST_DEVICE void apply(State&, const gnmr::UnitView& v, gnmr::UnitDecision& d,
                              std::uint32_t&) const {
    if (v.flags & gnmr::kInRecovery) d.scale = 0.5f;
  }
  std::string check() const { return {}; }
};

int main() {
  gnmr::GnmrController<gnmr::L2Norm, gnmr::EmaMean, gnmr::GnmrTrigger, HalveInRecovery> c(4);
  return c.step_norms(std::vector<float>(4, 1.0f)).granted == 0 ? 0 : 1;
}
