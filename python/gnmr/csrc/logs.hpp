// python/gnmr/csrc/logs.hpp — the two files a gnmr.Controller can write:
// the JSON Lines event log (gnmr::EventLog) and the per-unit norm trace
// that gnmr-replay reads (gnmr::TraceWriter).
//
// Plain C++ (no torch, no CUDA): the host core writes a step's rows right
// after the step; the CUDA glue (device.cu) writes them a step late, from
// pinned copies, through the same object. The names are the controller's
// unit names, so a trace recorded here replays under the same column names.
#pragma once

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "gnmr/core/types.hpp"
#include "gnmr/io/telemetry.hpp"
#include "gnmr/io/trace.hpp"

namespace gnmr_py {

// A file could not be opened or written: Python's OSError.
class IoError : public std::runtime_error {
 public:
  explicit IoError(const std::string& what) : std::runtime_error(what) {}
};

class Logs {
 public:
  explicit Logs(std::vector<std::string> names) : names_(std::move(names)), norms_(names_.size()) {}
  Logs(const Logs&) = delete;
  Logs& operator=(const Logs&) = delete;

  const std::vector<std::string>& names() const { return names_; }
  gnmr::EventLog* events() { return ev_.get(); }
  bool tracing() const { return tr_ != nullptr; }
  // The step of the last trace row written (0 before any).
  std::int64_t last_trace_step() const { return last_trace_step_; }

  // append: continue a file this controller's previous core wrote (the
  // Python controller moving to another device): no truncation, and no
  // second header in the trace.
  void open_events(const std::string& path, bool nonfinite_as_null, bool append = false) {
    // The new writer exists before the old one is closed: a failure
    // leaves the previous log as it was.
    auto f = open(path, "events", append);
    gnmr::EventLogOptions o;
    o.nonfinite_as_null = nonfinite_as_null;
    std::unique_ptr<gnmr::EventLog> w(new gnmr::EventLog(*f, o));
    close_events();
    ev_file_ = std::move(f);
    ev_ = std::move(w);
  }
  // aux_path: a second trace, of each unit's finished aux norm a step (the
  // noise-floor trigger's noise), that gnmr-replay --aux reads beside it.
  void open_trace(const std::string& path, bool append = false, std::int64_t last_step = 0,
                  const std::string& aux_path = std::string()) {
    // The rows the open writers still buffer go to their files first: the
    // new trace may be the same path, which opening truncates, and the old
    // stream must not write into it afterwards.
    if (tr_file_) tr_file_->flush();
    if (ax_file_) ax_file_->flush();
    // The aux file first: if it cannot be opened, the trace is not truncated.
    std::unique_ptr<std::ofstream> af;
    if (!aux_path.empty()) af = open(aux_path, "aux trace", append);
    auto f = open(path, "trace", append);
    std::unique_ptr<gnmr::TraceWriter> w(new gnmr::TraceWriter(*f, names_, !append));
    std::unique_ptr<gnmr::TraceWriter> aw;
    if (af) aw.reset(new gnmr::TraceWriter(*af, names_, !append));
    close_trace();
    tr_file_ = std::move(f);
    tr_ = std::move(w);
    ax_file_ = std::move(af);
    ax_ = std::move(aw);
    last_trace_step_ = append ? last_step : 0;
  }
  void close_events() {
    if (!ev_) return;
    ev_->flush();
    ev_.reset();
    finish(ev_file_, "events");
  }
  void close_trace() {
    if (!tr_) return;
    tr_.reset();
    ax_.reset();
    // Both files are closed whatever happens to either; the first failure
    // is reported.
    std::string err;
    if (ax_file_) {
      try {
        finish(ax_file_, "aux trace");
      } catch (const IoError& e) {
        err = e.what();
      }
    }
    try {
      finish(tr_file_, "trace");
    } catch (const IoError& e) {
      if (err.empty()) err = e.what();
    }
    if (!err.empty()) throw IoError(err);
  }
  void flush() {
    if (ev_) ev_->flush();
    if (tr_file_) {
      tr_file_->flush();
      if (!*tr_file_) throw IoError("gnmr: trace: write failed");
    }
    if (ax_file_) {
      ax_file_->flush();
      if (!*ax_file_) throw IoError("gnmr: aux trace: write failed");
    }
  }

  // One step's rows from a dense report array (host controller), and the
  // aux trace's from the step's finished aux norms (the Python layer opens
  // one only for a controller that reads aux, whose every step takes it).
  void write(const gnmr::StepSummary& s, const gnmr::UnitReport* reports,
             const std::vector<float>* aux_norms = nullptr) {
    if (ev_) ev_->write(s, reports, names_.size(), names_.data());
    if (tr_) {
      for (std::size_t u = 0; u < norms_.size(); ++u) norms_[u] = reports[u].norm;
      if (ax_ && (!aux_norms || aux_norms->size() != names_.size()))
        throw std::logic_error("gnmr: aux trace: a step without each unit's aux norm");
      write_trace(s.step, norms_.data(), ax_ ? aux_norms->data() : nullptr);
    }
  }
  // One trace row from a norm per unit (the CUDA glue's pinned copy), and
  // the aux trace's row from the finished aux norms when one is open.
  void write_trace(std::int64_t step, const float* norms, const float* aux_norms = nullptr) {
    tr_->write(step, norms, names_.size());
    if (!*tr_file_) throw IoError("gnmr: trace: write failed");
    if (ax_) {
      if (!aux_norms) throw std::logic_error("gnmr: aux trace: a step without each unit's aux norm");
      ax_->write(step, aux_norms, names_.size());
      if (!*ax_file_) throw IoError("gnmr: aux trace: write failed");
    }
    last_trace_step_ = step;
  }

 private:
  static std::unique_ptr<std::ofstream> open(const std::string& path, const char* what, bool append) {
    std::unique_ptr<std::ofstream> f(
        new std::ofstream(path, std::ios::binary | (append ? std::ios::app : std::ios::trunc)));
    if (!*f) throw IoError(std::string("gnmr: ") + what + ": cannot write '" + path + "'");
    return f;
  }
  static void finish(std::unique_ptr<std::ofstream>& f, const char* what) {
    f->flush();
    const bool ok = static_cast<bool>(*f);
    f.reset();
    if (!ok) throw IoError(std::string("gnmr: ") + what + ": write failed");
  }

  std::vector<std::string> names_;
  std::vector<float> norms_;
  // Each writer is declared after its file, so it is destroyed first.
  std::unique_ptr<std::ofstream> ev_file_;
  std::unique_ptr<gnmr::EventLog> ev_;
  std::unique_ptr<std::ofstream> tr_file_;
  std::unique_ptr<gnmr::TraceWriter> tr_;
  std::unique_ptr<std::ofstream> ax_file_;
  std::unique_ptr<gnmr::TraceWriter> ax_;
  std::int64_t last_trace_step_ = 0;
};

}  // namespace gnmr_py
