// Downstream consumer used by the packaging test: it compiles against an
// installed (or add_subdirectory'd) gnmr, runs the default controller over a
// short trace with one spike, and exits 0 only if the spike was clipped. It
// also checks that the headers it compiles against carry the version the
// CMake package reported (GNMR_PACKAGE_VERSION_*, set by its CMakeLists).
#include <gnmr/gnmr.hpp>

static_assert(GNMR_VERSION_MAJOR == GNMR_PACKAGE_VERSION_MAJOR &&
                  GNMR_VERSION_MINOR == GNMR_PACKAGE_VERSION_MINOR &&
                  GNMR_VERSION_PATCH == GNMR_PACKAGE_VERSION_PATCH,
              "gnmr's config.hpp and its CMake package report different versions");
static_assert(GNMR_VERSION == GNMR_VERSION_MAJOR * 10000 + GNMR_VERSION_MINOR * 100 +
                                  GNMR_VERSION_PATCH,
              "GNMR_VERSION does not encode the three parts");

#include <cstdio>
#include <vector>

int main() {
  gnmr::GnmrController<> c(4);
  std::vector<float> n(4, 1.0f);
  for (int t = 1; t <= 20; ++t) c.step_norms(n);
  n[2] = 10.0f;
  const gnmr::StepSummary& s = c.step_norms(n);
  const bool ok = s.granted == 1 && (c.decisions()[2].flags & gnmr::kGranted) &&
                  c.decisions()[2].scale < 0.2f && c.decisions()[0].scale == 1.0f;
  std::printf("gnmr %d.%d.%d consumer: %s\n", GNMR_VERSION_MAJOR, GNMR_VERSION_MINOR,
              GNMR_VERSION_PATCH, ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
