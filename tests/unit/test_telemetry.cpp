// Tests for gnmr/io/telemetry.hpp: the JSON Lines event log.
//
// Hand-built StepSummary / UnitReport records are logged and compared with
// hand-written expected lines; a scripted controller run is logged and each
// line parsed back (tests/support/flat_json.hpp) and checked against the
// controller's own reports and against hand-computed ratios. The event log
// allocates nothing per step (the counter: tests/support/alloc_counter.hpp).
#include <catch2/catch.hpp>

#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <new>
#include <random>
#include <sstream>
#include <streambuf>
#include <string>
#include <vector>

#include "../support/alloc_counter.hpp"
#include "../support/flat_json.hpp"
#include "gnmr/host/controller.hpp"
#include "gnmr/host/unit_norms.hpp"
#include "gnmr/io/telemetry.hpp"
#include "gnmr/presets/make.hpp"

using flat_json::JObject;
using flat_json::JParser;
using flat_json::JValue;
#if GNMR_TEST_COUNT_ALLOCS
using alloc_counter::g_allocs;
using alloc_counter::g_count_allocs;
#endif

namespace {

const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

JObject parse_line(const std::string& line) {
  JParser p{line};
  JObject o = p.object();
  INFO("line: " << line);
  REQUIRE(p.ok);
  const char* keys[] = {"step", "unit", "name", "event", "norm", "mean",
                        "ratio", "delta", "risk", "action"};
  REQUIRE(o.size() == 10);
  for (const char* k : keys) REQUIRE(o.count(k) == 1);
  return o;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string l;
  while (std::getline(in, l)) out.push_back(l);
  return out;
}

// A float field back as a float: number, "nan"/"inf"/"-inf", or null -> NaN.
float as_float(const JValue& v) {
  if (v.kind == JValue::kNull) return kNaN;
  return std::strtof(v.text.c_str(), nullptr);
}

std::uint32_t bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

gnmr::UnitReport rep(float norm, float mean, float ratio, float delta, float risk, float scale,
                     std::uint32_t flags) {
  return gnmr::UnitReport{norm, mean, ratio, delta, risk, scale, flags, 0};
}

// Discards everything without allocating.
struct NullBuf : std::streambuf {
  std::size_t bytes = 0;
  std::streamsize xsputn(const char*, std::streamsize n) override {
    bytes += static_cast<std::size_t>(n);
    return n;
  }
  int overflow(int c) override {
    ++bytes;
    return c;
  }
};

}  // namespace

TEST_CASE("EventLog writes the documented lines", "[telemetry]") {
  using namespace gnmr;
  std::vector<UnitReport> r(5, rep(1.0f, 1.0f, 1.0f, 0.0f, 0.33f, 1.0f, 0u));
  // unit 1: triggered and granted, clipped to a quarter
  r[1] = rep(8.0f, 2.0f, 4.0f, 2.5f, 1.5f, 0.25f, kTriggered | kGranted | kInRecovery);
  // unit 2: in recovery from earlier, quiet: no event
  r[2] = rep(1.0f, 1.0f, 1.0f, 0.0f, 0.0f, 1.0f, kInRecovery);
  // unit 3: non-finite
  r[3] = rep(kNaN, 1.5f, 0.0f, 0.0f, kInf, 0.0f, kNonFinite | kSkip);
  // unit 4: released, then triggered again and denied
  r[4] = rep(7.0f, 1.0f, 7.0f, -1.0f, 2.33333325f, 1.0f, kReleased | kTriggered | kDenied);
  StepSummary s;
  s.step = 42;
  s.triggered = 2;
  s.granted = 1;
  s.in_recovery = 2;
  s.denied = 1;
  s.nonfinite = 1;
  s.released = 1;
  s.max_ratio = 7.0f;
  s.max_ratio_unit = 4;
  s.skip_step = 1;
  const std::vector<std::string> names = {"emb", "h.0", "h.1", "we\"ird\\\n", "head"};
  std::ostringstream os;
  EventLog log(os);
  CHECK(log.write(s, r.data(), r.size(), names) == 7);
  const std::string want =
      "{\"step\":42,\"unit\":1,\"name\":\"h.0\",\"event\":\"trigger\",\"norm\":8,\"mean\":2,"
      "\"ratio\":4,\"delta\":2.5,\"risk\":1.5,\"action\":\"clip:0.25\"}\n"
      "{\"step\":42,\"unit\":1,\"name\":\"h.0\",\"event\":\"grant\",\"norm\":8,\"mean\":2,"
      "\"ratio\":4,\"delta\":2.5,\"risk\":1.5,\"action\":\"clip:0.25\"}\n"
      "{\"step\":42,\"unit\":3,\"name\":\"we\\\"ird\\\\\\u000a\",\"event\":\"nonfinite\","
      "\"norm\":\"nan\",\"mean\":1.5,\"ratio\":0,\"delta\":0,\"risk\":\"inf\",\"action\":\"skip\"}\n"
      "{\"step\":42,\"unit\":4,\"name\":\"head\",\"event\":\"release\",\"norm\":7,\"mean\":1,"
      "\"ratio\":7,\"delta\":-1,\"risk\":2.33333325,\"action\":\"none\"}\n"
      "{\"step\":42,\"unit\":4,\"name\":\"head\",\"event\":\"trigger\",\"norm\":7,\"mean\":1,"
      "\"ratio\":7,\"delta\":-1,\"risk\":2.33333325,\"action\":\"none\"}\n"
      "{\"step\":42,\"unit\":4,\"name\":\"head\",\"event\":\"deny\",\"norm\":7,\"mean\":1,"
      "\"ratio\":7,\"delta\":-1,\"risk\":2.33333325,\"action\":\"none\"}\n"
      "{\"step\":42,\"unit\":-1,\"name\":\"global\",\"event\":\"global_skip\",\"norm\":null,"
      "\"mean\":null,\"ratio\":7,\"delta\":null,\"risk\":null,\"action\":\"skip\"}\n";
  CHECK(os.str() == want);
  CHECK(log.lines_written() == 7);
  for (const auto& l : lines_of(os.str())) parse_line(l);  // valid JSON, all keys
}

TEST_CASE("EventLog options: null for non-finite, event mask, default names", "[telemetry]") {
  using namespace gnmr;
  std::vector<UnitReport> r = {
      rep(kInf, 0.0f, 0.0f, 0.0f, kInf, 0.0f, kNonFinite | kSkip),
      rep(-kInf, 0.0f, 0.0f, 0.0f, kInf, 0.0f, kNonFinite | kSkip),
      rep(5.0f, 1.0f, 5.0f, 0.0f, 2.0f, 0.2f, kTriggered | kGranted | kInRecovery | kResetMoments | kPromote)};
  StepSummary s;
  s.step = 7;
  s.triggered = 1;
  s.granted = 1;
  s.nonfinite = 2;
  std::ostringstream a, b;
  EventLogOptions opt;
  opt.nonfinite_as_null = true;
  EventLog la(a, opt);
  la.write(s, r.data(), r.size());
  const auto al = lines_of(a.str());
  REQUIRE(al.size() == 4);
  auto o = parse_line(al[0]);
  CHECK(o["name"].text == "unit0");
  CHECK(o["norm"].kind == JValue::kNull);
  CHECK(o["risk"].kind == JValue::kNull);
  o = parse_line(al[1]);
  CHECK(o["name"].text == "unit1");
  CHECK(o["norm"].kind == JValue::kNull);
  o = parse_line(al[3]);
  CHECK(o["event"].text == "grant");
  CHECK(o["action"].text == "reset_moments+promote+clip:0.200000003");

  EventLogOptions only_grants;
  only_grants.events = kEvGrant;
  EventLog lb(b, only_grants);
  CHECK(lb.write(s, r.data(), r.size()) == 1);
  CHECK(parse_line(lines_of(b.str()).at(0))["event"].text == "grant");

  // -inf as a string by default.
  std::ostringstream c;
  EventLog lc(c);
  lc.write(s, r.data(), r.size());
  CHECK(parse_line(lines_of(c.str()).at(1))["norm"].text == "-inf");
  CHECK(parse_line(lines_of(c.str()).at(1))["norm"].kind == JValue::kString);
}

TEST_CASE("EventLog skips quiet steps and rejects bad arguments", "[telemetry]") {
  using namespace gnmr;
  std::vector<UnitReport> r(3, rep(1.0f, 1.0f, 1.0f, 0.0f, 0.0f, 1.0f, kInRecovery));
  StepSummary s;
  s.step = 3;
  s.in_recovery = 3;
  std::ostringstream os;
  EventLog log(os);
  CHECK_FALSE(EventLog::has_events(s));
  CHECK(log.write(s, r.data(), r.size()) == 0);
  CHECK(os.str().empty());
  s.triggered = 1;
  r[0].flags |= kTriggered;
  CHECK_THROWS_AS(log.write(s, r.data(), r.size(), std::vector<std::string>{"a", "b"}),
                  std::invalid_argument);
  CHECK_THROWS_AS(log.write(s, nullptr, 3), std::invalid_argument);
  CHECK_THROWS_AS(EventLog(static_cast<std::FILE*>(nullptr)), std::invalid_argument);
}

TEST_CASE("EventLog floats round-trip through %.9g", "[telemetry]") {
  using namespace gnmr;
  std::mt19937 rng(99);
  std::vector<UnitReport> r(64);
  for (auto& u : r) {
    float f[5];
    for (float& x : f) {
      std::uint32_t b = rng();
      if ((b & 0x7f800000u) == 0x7f800000u) b &= 0xbfffffffu;  // keep it finite
      std::memcpy(&x, &b, sizeof x);
    }
    u = rep(f[0], f[1], f[2], f[3], f[4], 1.0f, kTriggered | kDenied);
  }
  StepSummary s;
  s.step = 1;
  s.triggered = s.denied = 64;
  std::ostringstream os;
  EventLog log(os);
  REQUIRE(log.write(s, r.data(), r.size()) == 128);
  const auto ls = lines_of(os.str());
  REQUIRE(ls.size() == 128);
  for (std::size_t k = 0; k < ls.size(); ++k) {
    auto o = parse_line(ls[k]);
    const UnitReport& u = r.at(static_cast<std::size_t>(std::stol(o["unit"].text)));
    CHECK(bits(as_float(o["norm"])) == bits(u.norm));
    CHECK(bits(as_float(o["mean"])) == bits(u.mean));
    CHECK(bits(as_float(o["ratio"])) == bits(u.ratio));
    CHECK(bits(as_float(o["delta"])) == bits(u.delta));
    CHECK(bits(as_float(o["risk"])) == bits(u.risk));
  }
}

TEST_CASE("EventLog to a FILE* matches the ostream output, across buffer refills", "[telemetry]") {
  using namespace gnmr;
  // 2000 units with events: far more than the 8 KiB internal buffer.
  const std::size_t n = 2000;
  std::vector<UnitReport> r(n);
  std::vector<std::string> names(n);
  for (std::size_t i = 0; i < n; ++i) {
    r[i] = rep(1.5f + static_cast<float>(i), 0.5f, 3.0f + static_cast<float>(i), 0.25f, 1.0f,
               i % 3 ? 1.0f : 0.5f, i % 2 ? (kTriggered | kDenied) : (kTriggered | kGranted | kInRecovery));
    names[i] = "block." + std::to_string(i) + ".weight";
  }
  StepSummary s;
  s.step = 1000000007;
  s.triggered = static_cast<std::uint32_t>(n);
  std::ostringstream os;
  EventLog(os).write(s, r.data(), n, names);
  std::FILE* f = std::tmpfile();
  REQUIRE(f != nullptr);
  {
    EventLog lf(f);
    CHECK(lf.write(s, r.data(), n, names) == 2 * n);
    lf.flush();
  }
  std::rewind(f);
  std::string back;
  char buf[4096];
  std::size_t k;
  while ((k = std::fread(buf, 1, sizeof buf, f)) > 0) back.append(buf, k);
  std::fclose(f);
  CHECK(back.size() > 8192 * 10);
  CHECK(back == os.str());
  const auto ls = lines_of(back);
  REQUIRE(ls.size() == 2 * n);
  auto o = parse_line(ls[2 * 1999 + 1]);
  CHECK(o["name"].text == "block.1999.weight");
  CHECK(o["event"].text == "deny");
  CHECK(o["step"].text == "1000000007");
}

#if GNMR_TEST_COUNT_ALLOCS
TEST_CASE("EventLog allocates nothing per step", "[telemetry]") {
  using namespace gnmr;
  const std::size_t n = 300;
  std::vector<UnitReport> r(n, rep(9.0f, 1.0f, 9.0f, 8.0f, 3.0f, 0.111111112f,
                                    kTriggered | kGranted | kInRecovery | kReleased));
  std::vector<std::string> names(n, std::string(40, 'x'));  // beyond SSO
  StepSummary s;
  s.triggered = s.granted = static_cast<std::uint32_t>(n);
  s.skip_step = 1;
  NullBuf nb;
  std::ostream os(&nb);
  EventLog log(os);
  g_allocs = 0;
  g_count_allocs = true;
  std::size_t lines = 0;
  for (int t = 1; t <= 200; ++t) {
    s.step = t;
    lines += log.write(s, r.data(), n, names);
  }
  g_count_allocs = false;
  CHECK(g_allocs == 0);
  CHECK(lines == 200 * (3 * n + 1));
  CHECK(nb.bytes > 0);
}

#endif

TEST_CASE("EventLog agrees with a controller's reports on a scripted run", "[telemetry]") {
  using namespace gnmr;
  // 6 units, at most 2 in recovery, lock 3, warm-up 5.
  GnmrTrigger trig;
  trig.warmup = 5;
  MaxO budget;
  budget.max_o = 2;
  budget.lock = 3;
  GnmrController<> c(6, {}, {}, trig, {}, budget);
  const std::vector<std::string> names = {"u0", "u1", "u2", "u3", "u4", "u5"};
  std::ostringstream os;
  EventLog log(os);
  std::vector<float> norms(6);
  std::size_t expect_lines = 0;
  std::map<std::int64_t, std::vector<UnitReport>> by_step;
  for (int t = 1; t <= 30; ++t) {
    for (std::size_t i = 0; i < 6; ++i) norms[i] = 1.0f + 0.125f * static_cast<float>(i);
    if (t == 12) {  // three spikes, two slots: u5 (largest ratio) and u4 granted, u1 denied
      norms[1] = 10.0f;
      norms[4] = 40.0f;
      norms[5] = 60.0f;
    }
    if (t == 20) norms[2] = kNaN;
    if (t == 21) norms[3] = -kInf;
    const StepSummary& s = c.step_norms(norms);
    by_step[t] = c.reports();
    expect_lines += s.triggered + s.granted + s.denied + s.released + s.nonfinite + s.skip_step;
    log.write_from(c, names);
  }
  const auto ls = lines_of(os.str());
  CHECK(ls.size() == expect_lines);
  CHECK(ls.size() == log.lines_written());
  std::map<std::string, int> per_event;
  for (const auto& l : ls) {
    auto o = parse_line(l);
    const std::int64_t t = std::stoll(o["step"].text);
    const int u = std::stoi(o["unit"].text);
    REQUIRE(u >= 0);
    const UnitReport& r = by_step.at(t).at(static_cast<std::size_t>(u));
    CHECK(o["name"].text == names[static_cast<std::size_t>(u)]);
    const std::string ev = o["event"].text;
    ++per_event[ev];
    const std::uint32_t bit = ev == "trigger"     ? kTriggered
                              : ev == "grant"     ? kGranted
                              : ev == "deny"      ? kDenied
                              : ev == "release"   ? kReleased
                              : ev == "nonfinite" ? kNonFinite
                                                  : 0u;
    CHECK((r.flags & bit) != 0u);
    if (std::isnan(r.norm)) {
      CHECK(o["norm"].text == "nan");
    } else {
      CHECK(bits(as_float(o["norm"])) == bits(r.norm));
    }
    CHECK(bits(as_float(o["ratio"])) == bits(r.ratio));
  }
  // The spike step, hand-checked: means are ~1 + i/8 (constant feed), so
  // u5's ratio is 60/1.625, u4's 40/1.5, u1's 10/1.125.
  std::vector<JObject> at12;
  for (const auto& l : ls) {
    auto o = parse_line(l);
    if (o["step"].text == "12") at12.push_back(o);
  }
  REQUIRE(at12.size() == 6);  // 3 triggers, 2 grants, 1 denial
  CHECK(at12[0]["unit"].text == "1");
  CHECK(at12[0]["event"].text == "trigger");
  CHECK(at12[1]["event"].text == "deny");
  CHECK(at12[1]["action"].text == "none");
  CHECK(at12[2]["unit"].text == "4");
  CHECK(at12[3]["event"].text == "grant");
  CHECK(as_float(at12[3]["ratio"]) == Approx(40.0 / 1.5).epsilon(1e-5));
  CHECK(at12[5]["unit"].text == "5");
  CHECK(at12[5]["event"].text == "grant");
  CHECK(as_float(at12[5]["ratio"]) == Approx(60.0 / 1.625).epsilon(1e-5));
  // Clip to kappa * mu: scale = mu / n.
  const std::string act = at12[5]["action"].text;
  REQUIRE(act.rfind("clip:", 0) == 0);
  CHECK(std::strtod(act.c_str() + 5, nullptr) == Approx(1.625 / 60.0).epsilon(1e-5));
  // Locks of 3 steps: released at step 15.
  CHECK(per_event["release"] == 2);
  CHECK(per_event["nonfinite"] == 2);
  CHECK(per_event["grant"] == 2);
  CHECK(per_event["deny"] == 1);
}
