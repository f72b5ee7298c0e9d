// Downstream consumer used by the packaging test: it only has to compile
// against an installed (or add_subdirectory'd) gnmr and exit 0.
#include <gnmr/config.hpp>
// TODO(core): use GnmrController<> once include/gnmr/gnmr.hpp exists
//   #include <gnmr/gnmr.hpp>
//   gnmr::GnmrController<> c(4);

#include <cstdio>
#include <limits>

int main() {
  const float inf = std::numeric_limits<float>::infinity();
  const bool ok = gnmr::is_finite(1.0f) && !gnmr::is_finite(inf) &&
                  gnmr::is_nan(gnmr::nan_f());
  std::printf("gnmr %d.%d.%d consumer: %s\n", GNMR_VERSION_MAJOR, GNMR_VERSION_MINOR,
              GNMR_VERSION_PATCH, ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
