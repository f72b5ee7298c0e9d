// Negative compile test: a NormPolicy without finish().
#include <gnmr/gnmr.hpp>

struct SumAbs {  // L1 norm
  static constexpr const char* kName = "l1";
  static constexpr gnmr::Combine kCombine = gnmr::Combine::kSum;
  GNMR_HOST_DEVICE static float identity() { return 0.0f; }
  GNMR_HOST_DEVICE static float element(float x) { return x < 0.0f ? -x : x; }
  GNMR_HOST_DEVICE static float combine(float a, float b) { return gnmr::math::add(a, b); }
#ifdef GNMR_CF_FIXED
  GNMR_HOST_DEVICE static float finish(float partial, double) { return partial; }
#endif
  std::string check() const { return {}; }
};

int main() {
  gnmr::GnmrController<SumAbs> c(4);
  return c.step(std::vector<float>(4, 1.0f)).triggered == 0 ? 0 : 1;
}
