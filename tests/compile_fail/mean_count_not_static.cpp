// Negative compile test: a MeanTracker whose count() is a non-static member.
// The step calls it as Mean::count(state), so it must be static.
#include <gnmr/gnmr.hpp>

struct LastValue {
  static constexpr const char* kName = "last";
  struct State {
    float last;
    std::uint32_t k;
  };
  GNMR_HOST_DEVICE static State init() { return State{0.0f, 0u}; }
#ifdef GNMR_CF_FIXED
  GNMR_HOST_DEVICE static std::uint32_t count(const State& s) { return s.k; }
#else
  GNMR_HOST_DEVICE std::uint32_t count(const State& s) const { return s.k; }
#endif
  GNMR_HOST_DEVICE float mean(const State& s) const { return s.last; }
  GNMR_HOST_DEVICE void push(State& s, float x) const {
    s.last = x;
    s.k = s.k == 0xffffffffu ? s.k : s.k + 1;
  }
  std::string check() const { return {}; }
};

int main() {
  gnmr::GnmrController<gnmr::L2Norm, LastValue> c(4);
  return c.step_norms(std::vector<float>(4, 1.0f)).triggered == 0 ? 0 : 1;
}
