// gnmr/io/telemetry.hpp — EventLog: the controller's decisions as JSON Lines.
//
// One line per event, in this order within a step: for each unit with an
// event, by index, release, nonfinite, trigger, grant, deny; then one
// systemic line if the step is systemic (gnmr/step/systemic.hpp); then one
// global_skip line if the step suggests a global skip. A line looks like
//   {"step":12,"unit":3,"name":"h.3.attn","event":"grant","norm":12,
//    "mean":1.5,"ratio":8,"delta":3,"risk":2.66666675,"action":"clip:0.125"}
// (one line in the file). Floats are "%.9g" (they read back bit-exact);
// non-finite floats are the JSON strings "nan", "inf", "-inf" by default,
// or null with EventLogOptions::nonfinite_as_null. null otherwise means
// "not applicable": a global_skip line (unit -1, name "global") has null
// norm/mean/delta/risk and carries the step's max ratio in "ratio". A
// systemic line (unit -1, name "global") carries the step's triggered count
// in "triggered" and its action: "clip-triggered", "skip", or
// "global-clip:<s>" with the total norm G in "norm", its tracked mean M in
// "mean" and G / M in "ratio" (null while M has no sample; null norm and
// mean under the other actions, which compute no total).
// "action" is the unit's decision this step, the same on each of its lines:
// "skip", "reset_moments", "promote", "clip:<scale>" (scale != 1), joined
// with '+' when several apply, or "none".
//
// The log takes a StepSummary and a UnitReport array from anywhere: the host
// controller's summary()/reports(), a DynController, or host copies of the
// CUDA backend's device buffers. It never asks for them itself, so logging
// does not bring back a host sync (OLMo-core PR #43, docs/presets.md). The CUDA path
// is gnmr::cuda::TelemetryDrain (gnmr/cuda/telemetry.cuh): after step t a
// kernel compacts the units with events (none on a quiet step) and an
// asynchronous copy takes them and the summary to pinned host memory; the
// host writes them with write_sparse() a step later, when the copy has long
// finished — the log runs one step late and the GPU never waits for it.
// has_events(summary) lets a caller skip the reports on quiet steps.
//
// Cost per step: a scan of the summary; on a step with events, a scan of
// the N flags and the formatting of the lines with events into a fixed
// member buffer handed to the stream in chunks. No allocation per step
// beyond what the stream itself does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "gnmr/core/types.hpp"
#include "gnmr/detail/format.hpp"
#include "gnmr/step/systemic.hpp"

namespace gnmr {

// Which events to write (all by default).
enum EventMask : std::uint32_t {
  kEvTrigger = 1u << 0,
  kEvGrant = 1u << 1,
  kEvDeny = 1u << 2,
  kEvRelease = 1u << 3,
  kEvNonFinite = 1u << 4,
  kEvGlobalSkip = 1u << 5,
  kEvSystemic = 1u << 6,
  kEvAll = 0x7fu,
};

struct EventLogOptions {
  bool nonfinite_as_null = false;  // default: "nan" / "inf" / "-inf" strings
  std::uint32_t events = kEvAll;   // EventMask bits
};

class EventLog {
 public:
  explicit EventLog(std::ostream& os, EventLogOptions opt = {}) : os_(&os), opt_(opt) {}
  explicit EventLog(std::FILE* f, EventLogOptions opt = {}) : file_(f), opt_(opt) {
    if (f == nullptr) throw std::invalid_argument("gnmr: EventLog: null FILE*");
  }
  EventLog(const EventLog&) = delete;
  EventLog& operator=(const EventLog&) = delete;
  ~EventLog() {
    try {
      drain();
    } catch (...) {
    }
  }

  // Does this step have anything to log? (Cheap: the summary alone.)
  static bool has_events(const StepSummary& s) { return step_has_events(s); }

  // Logs one step; names[i] names unit i (nullptr: "unit<i>"). Returns the
  // number of lines written. Throws std::runtime_error if the stream fails.
  std::size_t write(const StepSummary& s, const UnitReport* reports, std::size_t n,
                    const std::string* names = nullptr) {
    if (reports == nullptr && n > 0) throw std::invalid_argument("gnmr: EventLog: null reports");
    if (!has_events(s)) return 0;
    std::size_t lines = 0;
    for (std::size_t i = 0; i < n; ++i) lines += unit_lines(s.step, i, names, reports[i]);
    return finish_step(s, lines);
  }
  // Sparse form: only the units with events, reports[j] belonging to unit
  // units[j] (ascending), as the CUDA backend's telemetry drain delivers them
  // (gnmr/cuda/telemetry.cuh). names, if given, has one entry per unit of
  // the controller, indexed by unit.
  std::size_t write_sparse(const StepSummary& s, const std::uint32_t* units,
                           const UnitReport* reports, std::size_t count,
                           const std::string* names = nullptr) {
    if ((reports == nullptr || units == nullptr) && count > 0)
      throw std::invalid_argument("gnmr: EventLog: null sparse reports");
    if (!has_events(s)) return 0;
    std::size_t lines = 0;
    for (std::size_t j = 0; j < count; ++j) lines += unit_lines(s.step, units[j], names, reports[j]);
    return finish_step(s, lines);
  }

  // names empty: "unit<i>"; otherwise one name per unit.
  std::size_t write(const StepSummary& s, const UnitReport* reports, std::size_t n,
                    const std::vector<std::string>& names) {
    if (!names.empty() && names.size() != n)
      throw std::invalid_argument("gnmr: EventLog: " + std::to_string(names.size()) +
                                  " unit names for " + std::to_string(n) + " units");
    return write(s, reports, n, names.empty() ? nullptr : names.data());
  }
  // Anything with summary() and reports() (GnmrController, DynController).
  template <class Controller>
  std::size_t write_from(const Controller& c, const std::vector<std::string>& names = {}) {
    return write(c.summary(), c.reports().data(), c.reports().size(), names);
  }

  std::uint64_t lines_written() const { return lines_; }
  void flush() {
    drain();
    if (os_) os_->flush();
    if (file_) std::fflush(file_);
  }

 private:
  std::size_t unit_lines(std::int64_t step, std::size_t i, const std::string* names,
                         const UnitReport& r) {
    if (!(r.flags & kEventFlags)) return 0;
    const std::string* name = names ? &names[i] : nullptr;
    std::size_t lines = 0;
    if (r.flags & kReleased) lines += unit_line(step, i, name, "release", kEvRelease, r);
    if (r.flags & kNonFinite) lines += unit_line(step, i, name, "nonfinite", kEvNonFinite, r);
    if (r.flags & kTriggered) lines += unit_line(step, i, name, "trigger", kEvTrigger, r);
    if (r.flags & kGranted) lines += unit_line(step, i, name, "grant", kEvGrant, r);
    if (r.flags & kDenied) lines += unit_line(step, i, name, "deny", kEvDeny, r);
    return lines;
  }
  std::size_t finish_step(const StepSummary& s, std::size_t lines) {
    if (s.systemic && (opt_.events & kEvSystemic)) {
      begin_line(s.step, -1);
      put("\"name\":\"global\",\"event\":\"systemic\",\"triggered\":");
      char num[detail::kNumBuf];
      put(num, detail::format_int(num, static_cast<std::int64_t>(s.triggered)));
      const bool total = s.systemic == static_cast<std::uint32_t>(SystemicAction::kGlobalClip);
      put(",\"norm\":");
      total ? put_float(s.total_norm) : put("null");
      put(",\"mean\":");
      total ? put_float(s.total_mean) : put("null");
      put(",\"ratio\":");
      if (total && s.total_mean > 0.0f)
        put_float(math::div(s.total_norm, s.total_mean));
      else
        put("null");
      put(",\"delta\":null,\"risk\":null,\"action\":\"");
      put(systemic_action_name(static_cast<SystemicAction>(s.systemic)));
      if (total) {
        put(":");
        put(num, detail::format_float(num, s.systemic_scale));
      }
      put("\"}\n");
      ++lines;
    }
    if (s.skip_step && (opt_.events & kEvGlobalSkip)) {
      begin_line(s.step, -1);
      put("\"name\":\"global\",\"event\":\"global_skip\",\"norm\":null,\"mean\":null,\"ratio\":");
      put_float(s.max_ratio_unit >= 0 ? s.max_ratio : 0.0f);
      put(",\"delta\":null,\"risk\":null,\"action\":\"skip\"}\n");
      ++lines;
    }
    drain();
    lines_ += lines;
    return lines;
  }

  static const char* action_text(const UnitReport& r, char (&buf)[64]) {
    std::size_t k = 0;
    const auto add = [&](const char* s, std::size_t len) {
      if (k) buf[k++] = '+';
      std::memcpy(buf + k, s, len);
      k += len;
    };
    if (r.flags & kSkip) add("skip", 4);
    if (r.flags & kResetMoments) add("reset_moments", 13);
    if (r.flags & kPromote) add("promote", 7);
    if (!(r.flags & kSkip) && r.scale != 1.0f) {
      char num[detail::kNumBuf];
      const std::size_t len = detail::format_float(num, r.scale);
      if (k) buf[k++] = '+';
      std::memcpy(buf + k, "clip:", 5);
      std::memcpy(buf + k + 5, num, len);
      k += 5 + len;
    }
    if (!k) add("none", 4);
    buf[k] = '\0';
    return buf;
  }

  std::size_t unit_line(std::int64_t step, std::size_t unit, const std::string* name,
                        const char* event, std::uint32_t bit, const UnitReport& r) {
    if (!(opt_.events & bit)) return 0;
    begin_line(step, static_cast<std::int64_t>(unit));
    put("\"name\":\"");
    if (name) {
      put_escaped(*name);
    } else {
      char num[detail::kNumBuf];
      put("unit");
      put(num, detail::format_int(num, static_cast<std::int64_t>(unit)));
    }
    put("\",\"event\":\"");
    put(event);
    put("\",\"norm\":");
    put_float(r.norm);
    put(",\"mean\":");
    put_float(r.mean);
    put(",\"ratio\":");
    put_float(r.ratio);
    put(",\"delta\":");
    put_float(r.delta);
    put(",\"risk\":");
    put_float(r.risk);
    put(",\"action\":\"");
    char act[64];
    put(action_text(r, act));
    put("\"}\n");
    return 1;
  }

  void begin_line(std::int64_t step, std::int64_t unit) {
    char num[detail::kNumBuf];
    put("{\"step\":");
    put(num, detail::format_int(num, step));
    put(",\"unit\":");
    put(num, detail::format_int(num, unit));
    put(",");
  }

  void put_float(float v) {
    char num[detail::kNumBuf];
    const std::size_t len = detail::format_float(num, v);
    if (is_finite(v)) {
      put(num, len);
    } else if (opt_.nonfinite_as_null) {
      put("null", 4);
    } else {
      put("\"", 1);
      put(num, len);
      put("\"", 1);
    }
  }

  // JSON string escaping: '"', '\\' and control characters; other bytes
  // (UTF-8 included) pass through.
  void put_escaped(const std::string& s) {
    static const char kHex[] = "0123456789abcdef";
    for (const char ch : s) {
      const auto c = static_cast<unsigned char>(ch);
      if (c == '"' || c == '\\') {
        const char e[2] = {'\\', ch};
        put(e, 2);
      } else if (c < 0x20) {
        const char e[6] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 15]};
        put(e, 6);
      } else {
        put(&ch, 1);
      }
    }
  }

  void put(const char* s) { put(s, std::strlen(s)); }
  void put(const char* s, std::size_t len) {
    while (len > 0) {
      if (len_ == sizeof buf_) drain();
      const std::size_t k = len < sizeof buf_ - len_ ? len : sizeof buf_ - len_;
      std::memcpy(buf_ + len_, s, k);
      len_ += k;
      s += k;
      len -= k;
    }
  }
  void drain() {
    if (len_ == 0) return;
    const std::size_t k = len_;
    len_ = 0;
    if (os_) {
      os_->write(buf_, static_cast<std::streamsize>(k));
      if (!*os_) throw std::runtime_error("gnmr: EventLog: write to the stream failed");
    } else if (std::fwrite(buf_, 1, k, file_) != k) {
      throw std::runtime_error("gnmr: EventLog: write to the FILE* failed");
    }
  }

  std::ostream* os_ = nullptr;
  std::FILE* file_ = nullptr;
  EventLogOptions opt_;
  std::uint64_t lines_ = 0;
  std::size_t len_ = 0;
  char buf_[8192];
};

}  // namespace gnmr
