// The GPU test "controller vs host" (tests/cuda/test_controller.cu) compares
// the device with the host on traces that must exercise something: denials
// or systemic steps, grants, both systemic and ordinary steps under a
// systemic rule, a per-step cap that binds. Those preconditions are a
// function of the host controller and the trace alone, so they are checked
// here, on every CPU run, for the quick and the full sizes: a case that
// cannot meet them is caught before a GPU runs it (tests/support/
// controller_cases.hpp holds the cases both suites use).
#include <catch2/catch.hpp>

#include <string>

#include "../support/controller_cases.hpp"

TEST_CASE("GPU controller cases: every trace exercises what its comparison needs", "[gpu-preconditions]") {
  for (const bool quick : {true, false}) {
    ctlcases::visit_cases(quick, [quick](const ctlcases::Case& c, auto&& host) {
      INFO(c.name << (quick ? " [quick]" : ""));
      const ctlcases::Stats st = ctlcases::host_stats(c, host);
      CHECK(ctlcases::unmet(c, host.policies(), st) == "");
    });
  }
}
