// Tests for gnmr/io/trace.hpp: the trace CSV reader and writer.
//
// The reader is checked against hand-written CSV text with known values,
// and every error case against the line number a person would point at.
// The writer is checked by reading its output back bit for bit, including
// NaN, +-Inf, subnormals and FLT_MAX.
#include <catch2/catch.hpp>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gnmr/io/trace.hpp"

namespace {

gnmr::Trace parse(const std::string& text) {
  std::istringstream in(text);
  return gnmr::read_trace(in);
}

// The TraceError a malformed text gives (fails the test if none).
gnmr::TraceError parse_error(const std::string& text) {
  try {
    parse(text);
  } catch (const gnmr::TraceError& e) {
    return e;
  }
  FAIL("no TraceError for:\n" << text);
  return gnmr::TraceError(0, "");
}

std::uint32_t bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

}  // namespace

TEST_CASE("read_trace parses a well-formed trace", "[trace]") {
  const gnmr::Trace t = parse(
      "# recorded by a test\n"
      "step, embed ,h.0.attn,h.0.mlp\r\n"
      "\n"
      "1,0.5,1.25,3\r\n"
      "  2 , 1e-3 ,  NaN,inf\n"
      "# a comment between rows\n"
      "5,+2.5,-inf,Infinity\n"
      "7,1e39,1e-50,0\n");
  REQUIRE(t.names == std::vector<std::string>{"embed", "h.0.attn", "h.0.mlp"});
  REQUIRE(t.steps == std::vector<std::int64_t>{1, 2, 5, 7});
  REQUIRE(t.num_units() == 3);
  REQUIRE(t.num_steps() == 4);
  REQUIRE(t.norms.size() == 12);
  CHECK(t.row(0)[0] == 0.5f);
  CHECK(t.row(0)[1] == 1.25f);
  CHECK(t.row(0)[2] == 3.0f);
  CHECK(t.row(1)[0] == 1e-3f);
  CHECK(std::isnan(t.row(1)[1]));
  CHECK(t.row(1)[2] == std::numeric_limits<float>::infinity());
  CHECK(t.row(2)[0] == 2.5f);
  CHECK(t.row(2)[1] == -std::numeric_limits<float>::infinity());
  CHECK(t.row(2)[2] == std::numeric_limits<float>::infinity());
  // Beyond the float range: +inf (overflow) and 0 (underflow).
  CHECK(t.row(3)[0] == std::numeric_limits<float>::infinity());
  CHECK(t.row(3)[1] == 0.0f);
  CHECK(t.row(3)[2] == 0.0f);
}

TEST_CASE("read_trace rounds decimal cells to the nearest float", "[trace]") {
  // 0.1 is not a float; the nearest is 0x3dcccccd. 16777217 rounds to even.
  const gnmr::Trace t = parse("step,a,b\n1,0.1,16777217\n");
  CHECK(bits(t.row(0)[0]) == 0x3dcccccdu);
  CHECK(t.row(0)[1] == 16777216.0f);
}

TEST_CASE("read_trace reports malformed traces with their line number", "[trace]") {
  SECTION("empty file") {
    const auto e = parse_error("");
    CHECK(e.line == 1);
    CHECK_THAT(e.message, Catch::Contains("empty trace"));
  }
  SECTION("comments only") {
    const auto e = parse_error("# nothing\n\n");
    CHECK(e.line == 3);
    CHECK_THAT(e.message, Catch::Contains("empty trace"));
  }
  SECTION("missing header: data row first") {
    const auto e = parse_error("1,2.0,3.0\n2,2.0,3.0\n");
    CHECK(e.line == 1);
    CHECK_THAT(e.message, Catch::Contains("missing header"));
  }
  SECTION("missing header: other first field") {
    const auto e = parse_error("# c\nstep_no,a\n1,2\n");
    CHECK(e.line == 2);
    CHECK_THAT(e.message, Catch::Contains("'step'"));
  }
  SECTION("header without units") {
    CHECK(parse_error("step\n1\n").line == 1);
    CHECK(parse_error("step,a,,b\n1,2,3,4\n").line == 1);
  }
  SECTION("quote or CR in a unit name") {
    CHECK(parse_error("step,\"a\"\n1,1\n").line == 1);
    CHECK(parse_error("# x\nstep,a\rb\n1,1\n").line == 2);
  }
  SECTION("duplicate unit name") {
    const auto e = parse_error("step,a,b,a\n1,1,1,1\n");
    CHECK(e.line == 1);
    CHECK_THAT(e.message, Catch::Contains("duplicate unit name 'a'"));
  }
  SECTION("header only") {
    const auto e = parse_error("step,a,b\n");
    CHECK(e.line == 2);
    CHECK_THAT(e.message, Catch::Contains("no data rows"));
  }
  SECTION("ragged row: too few cells") {
    const auto e = parse_error("step,a,b\n1,1,2\n2,1\n3,1,2\n");
    CHECK(e.line == 3);
    CHECK_THAT(e.message, Catch::Contains("expected 3 cells") && Catch::Contains("got 2"));
  }
  SECTION("ragged row: too many cells") {
    const auto e = parse_error("step,a,b\n\n1,1,2,3\n");
    CHECK(e.line == 3);
    CHECK_THAT(e.message, Catch::Contains("got 4"));
  }
  SECTION("non-numeric cell") {
    const auto e = parse_error("step,a,b\n1,1,2\n2,1,2x\n");
    CHECK(e.line == 3);
    CHECK_THAT(e.message, Catch::Contains("'2x'") && Catch::Contains("unit 'b'"));
  }
  SECTION("hex and double signs are not numbers here") {
    CHECK(parse_error("step,a\n1,0x10\n").line == 2);
    CHECK(parse_error("step,a\n1,--1\n").line == 2);
    CHECK(parse_error("step,a\n1,+-1\n").line == 2);
  }
  SECTION("empty cell") {
    const auto e = parse_error("step,a,b\n1,,2\n");
    CHECK(e.line == 2);
    CHECK_THAT(e.message, Catch::Contains("empty cell for unit 'a'"));
  }
  SECTION("negative finite norm") {
    const auto e = parse_error("step,a\n1,1\n2,-0.5\n");
    CHECK(e.line == 3);
    CHECK_THAT(e.message, Catch::Contains("negative norm"));
  }
  SECTION("non-integer step") {
    const auto e = parse_error("step,a\n1.5,1\n");
    CHECK(e.line == 2);
    CHECK_THAT(e.message, Catch::Contains("not an integer"));
  }
  SECTION("step overflowing int64") {
    CHECK(parse_error("step,a\n99999999999999999999,1\n").line == 2);
  }
  SECTION("non-increasing step") {
    const auto e = parse_error("step,a\n1,1\n2,1\n# gap\n2,1\n");
    CHECK(e.line == 5);
    CHECK_THAT(e.message, Catch::Contains("not greater than the previous step 2"));
    CHECK(parse_error("step,a\n5,1\n4,1\n").line == 3);
  }
  SECTION("what() carries the line number too") {
    const auto e = parse_error("step,a\n1,zz\n");
    CHECK_THAT(std::string(e.what()), Catch::StartsWith("line 2: "));
  }
}

TEST_CASE("TraceReader streams rows one at a time", "[trace]") {
  std::istringstream in("step,a,b\n3,1,2\n9,4,5\n");
  gnmr::TraceReader r(in);
  REQUIRE(r.num_units() == 2);
  std::int64_t step = 0;
  float row[2] = {0, 0};
  REQUIRE(r.next(step, row));
  CHECK(step == 3);
  CHECK(row[1] == 2.0f);
  CHECK(r.line() == 2);
  REQUIRE(r.next(step, row));
  CHECK(step == 9);
  CHECK(row[0] == 4.0f);
  CHECK_FALSE(r.next(step, row));
  CHECK(r.rows_read() == 2);
}

TEST_CASE("TraceWriter output reads back bit for bit", "[trace]") {
  std::mt19937 rng(1234);
  const std::size_t units = 7;
  std::vector<std::string> names;
  for (std::size_t i = 0; i < units; ++i) names.push_back("layer." + std::to_string(i) + ".w");
  const float specials[] = {0.0f,
                            std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            FLT_MAX,
                            FLT_MIN,
                            std::numeric_limits<float>::denorm_min(),
                            1.0f,
                            0.1f};
  std::vector<std::int64_t> steps;
  std::vector<float> norms;
  std::uniform_int_distribution<std::uint32_t> any_bits(0, 0x7f7fffffu);  // finite, >= 0
  std::int64_t step = 0;
  for (int s = 0; s < 300; ++s) {
    step += 1 + static_cast<std::int64_t>(rng() % 3);
    steps.push_back(step);
    for (std::size_t u = 0; u < units; ++u) {
      float v;
      if (rng() % 4 == 0) {
        v = specials[rng() % (sizeof specials / sizeof specials[0])];
      } else {
        const std::uint32_t b = any_bits(rng);
        std::memcpy(&v, &b, sizeof v);
      }
      norms.push_back(v);
    }
  }
  std::ostringstream out;
  {
    gnmr::TraceWriter w(out, names);
    for (std::size_t s = 0; s < steps.size(); ++s) w.write(steps[s], norms.data() + s * units, units);
    CHECK(w.rows_written() == steps.size());
  }
  std::istringstream in(out.str());
  const gnmr::Trace t = gnmr::read_trace(in);
  REQUIRE(t.names == names);
  REQUIRE(t.steps == steps);
  REQUIRE(t.norms.size() == norms.size());
  for (std::size_t i = 0; i < norms.size(); ++i) {
    if (std::isnan(norms[i])) {
      CHECK(std::isnan(t.norms[i]));
    } else {
      INFO("cell " << i << " value " << norms[i]);
      CHECK(bits(t.norms[i]) == bits(norms[i]));
    }
  }
}

TEST_CASE("TraceWriter writes the documented format", "[trace]") {
  std::ostringstream out;
  gnmr::TraceWriter w(out, {"a", "b.c"});
  const float r1[] = {0.5f, 3.0f};
  const float r2[] = {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity()};
  w.write(1, r1, 2);
  w.write(10, r2, 2);
  CHECK(out.str() == "step,a,b.c\n1,0.5,3\n10,nan,-inf\n");
}

TEST_CASE("TraceWriter rejects what the reader would reject", "[trace]") {
  std::ostringstream out;
  CHECK_THROWS_AS(gnmr::TraceWriter(out, {}), std::invalid_argument);
  CHECK_THROWS_AS(gnmr::TraceWriter(out, {"a,b"}), std::invalid_argument);
  CHECK_THROWS_AS(gnmr::TraceWriter(out, {"a", ""}), std::invalid_argument);
  CHECK_THROWS_AS(gnmr::TraceWriter(out, {" a"}), std::invalid_argument);
  CHECK_THROWS_AS(gnmr::TraceWriter(out, {"a\nb"}), std::invalid_argument);
  CHECK_THROWS_AS(gnmr::TraceWriter(out, {"a", "a"}), std::invalid_argument);
  gnmr::TraceWriter w(out, {"a", "b"});
  const float r[] = {1.0f, 2.0f};
  CHECK_THROWS_AS(w.write(1, r, 1), std::invalid_argument);
  w.write(4, r, 2);
  CHECK_THROWS_AS(w.write(4, r, 2), std::invalid_argument);
  CHECK_THROWS_AS(w.write(3, r, 2), std::invalid_argument);
}

TEST_CASE("parse_float / parse_int64: the trace's number syntax, whole text only", "[trace]") {
  float f = -7.0f;
  REQUIRE(gnmr::parse_float("1.5", f));
  CHECK(f == 1.5f);
  REQUIRE(gnmr::parse_float("+2e3", f));
  CHECK(f == 2000.0f);
  REQUIRE(gnmr::parse_float("-Infinity", f));
  CHECK((std::isinf(f) && f < 0.0f));
  REQUIRE(gnmr::parse_float("NaN", f));
  CHECK(std::isnan(f));
  REQUIRE(gnmr::parse_float("1e39", f));  // beyond the float range: +inf
  CHECK((std::isinf(f) && f > 0.0f));
  REQUIRE(gnmr::parse_float("3.40282347e+38", f));
  CHECK(bits(f) == 0x7f7fffffu);
  f = -7.0f;
  for (const char* bad : {"", " 1", "1,5", "0x10", "1.5x", "--1", "+-1", "e5"}) {
    CHECK_FALSE(gnmr::parse_float(bad, f));
    CHECK(f == -7.0f);  // unchanged on failure
  }

  std::int64_t i = -7;
  REQUIRE(gnmr::parse_int64("+42", i));
  CHECK(i == 42);
  REQUIRE(gnmr::parse_int64("-9223372036854775808", i));
  CHECK(i == std::numeric_limits<std::int64_t>::min());
  i = -7;
  for (const char* bad : {"", "12abc", "9223372036854775808", "1.0", "0x1", " 3"}) {
    CHECK_FALSE(gnmr::parse_int64(bad, i));
    CHECK(i == -7);  // unchanged, also after a parsable prefix ("12abc")
  }
}
