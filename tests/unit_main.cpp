// The single Catch2 v2 main() for every gnmr test executable (built once as
// the gnmr_catch_main object library; see tests/CMakeLists.txt).
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
