// Placeholder smoke test: proves the test harness builds and that the
// bit-level float classifiers in config.hpp behave. Real suites go next to
// it in tests/unit/ (picked up by the glob in tests/CMakeLists.txt).
#include "gnmr/core/math.hpp"

#include <catch2/catch.hpp>

#include <cfloat>
#include <limits>

TEST_CASE("is_finite and is_nan classify special values", "[smoke][config]") {
  const float inf = std::numeric_limits<float>::infinity();
  const float qnan = std::numeric_limits<float>::quiet_NaN();

  CHECK(gnmr::is_finite(0.0f));
  CHECK(gnmr::is_finite(-0.0f));
  CHECK(gnmr::is_finite(1.5f));
  CHECK(gnmr::is_finite(FLT_MAX));
  CHECK(gnmr::is_finite(-FLT_MAX));
  CHECK(gnmr::is_finite(FLT_TRUE_MIN));  // subnormals are finite
  CHECK_FALSE(gnmr::is_finite(inf));
  CHECK_FALSE(gnmr::is_finite(-inf));
  CHECK_FALSE(gnmr::is_finite(qnan));

  CHECK(gnmr::is_nan(qnan));
  CHECK(gnmr::is_nan(-qnan));
  CHECK_FALSE(gnmr::is_nan(inf));
  CHECK_FALSE(gnmr::is_nan(-inf));
  CHECK_FALSE(gnmr::is_nan(0.0f));
  CHECK_FALSE(gnmr::is_nan(1.5f));
}

TEST_CASE("inf_f and nan_f round-trip through the classifiers", "[smoke][config]") {
  CHECK_FALSE(gnmr::is_finite(gnmr::inf_f()));
  CHECK_FALSE(gnmr::is_nan(gnmr::inf_f()));
  CHECK(gnmr::is_nan(gnmr::nan_f()));
  CHECK_FALSE(gnmr::is_finite(gnmr::nan_f()));
}
