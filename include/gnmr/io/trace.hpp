// gnmr/io/trace.hpp — the trace CSV: per-unit gradient norms, one row a step.
//
// A training run records its norms with TraceWriter; gnmr-replay (tools/)
// reads them back with read_trace() and runs any controller over them, so
// thresholds can be tuned offline on the run's own data (docs/tuning.md).
//
// Format (plain CSV, no quoting):
//   step,<name1>,<name2>,...        header; the first field is literally "step"
//   <step>,<norm1>,<norm2>,...      one row per step, steps strictly increasing
// Norm cells are decimal floats; nan, inf, -inf (any case, also "infinity")
// are valid and mean a non-finite norm. Values beyond the float range read
// as +-inf. Blank lines and lines starting with '#' are ignored anywhere;
// spaces around cells and a trailing '\r' (CRLF files) are trimmed. Unit
// names are non-empty, unique, and contain no ',', '"', CR or LF.
//
// Every malformed input is a TraceError carrying the 1-based line number:
// an empty file, a missing header, a ragged row, a non-numeric or negative
// cell, a non-increasing step, a header without data rows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <istream>
#include <ostream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gnmr/detail/format.hpp"

namespace gnmr {

struct TraceError : std::runtime_error {
  TraceError(std::size_t line_no, const std::string& msg)
      : std::runtime_error("line " + std::to_string(line_no) + ": " + msg),
        line(line_no),
        message(msg) {}
  std::size_t line;     // 1-based line of the input where the problem is
  std::string message;  // without the line number (what() has both)
};

struct Trace {
  std::vector<std::string> names;  // one per unit (column)
  std::vector<std::int64_t> steps;
  std::vector<float> norms;  // row-major: norms[s * names.size() + u]

  std::size_t num_units() const { return names.size(); }
  std::size_t num_steps() const { return steps.size(); }
  const float* row(std::size_t s) const { return norms.data() + s * names.size(); }
};

namespace detail {
inline void trim(const char*& b, const char*& e) {
  while (b != e && (*b == ' ' || *b == '\t')) ++b;
  while (e != b && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r')) --e;
}
inline std::string cell_text(const char* b, const char* e) {
  std::string s(b, e);
  if (s.size() > 40) s = s.substr(0, 40) + "...";
  return s;
}
}  // namespace detail

// The trace's number syntax, for tools that read the same numbers from
// other text (a config file, a command line): the whole of `text` must be
// one decimal number, read the same in every locale. parse_float accepts
// what a norm cell accepts (nan, inf, -inf, infinity in any case, a leading
// '+'; beyond the float range reads as +-inf; hex floats are rejected);
// parse_int64 a decimal integer, overflow rejected. Both return false on
// anything else and then leave `out` unchanged.
inline bool parse_float(std::string_view text, float& out) {
  float v = 0.0f;
  if (!detail::parse_float(text.data(), text.data() + text.size(), v)) return false;
  out = v;
  return true;
}
inline bool parse_int64(std::string_view text, std::int64_t& out) {
  std::int64_t v = 0;  // from_chars writes a prefix's value before we reject the rest
  if (!detail::parse_int64(text.data(), text.data() + text.size(), v)) return false;
  out = v;
  return true;
}

// Streams a trace row by row (a multi-GB trace need not fit in memory).
// The constructor reads the header; next() the following rows.
class TraceReader {
 public:
  explicit TraceReader(std::istream& in) : in_(in) { read_header(); }

  const std::vector<std::string>& names() const { return names_; }
  std::size_t num_units() const { return names_.size(); }
  // Line number of the last line read (the row next() just returned).
  std::size_t line() const { return line_; }
  std::size_t rows_read() const { return rows_; }

  // Reads the next data row into step and norms[0 .. num_units()); false at
  // the end of the input. Throws TraceError on a malformed row.
  bool next(std::int64_t& step, float* norms) {
    const char* b = nullptr;
    const char* e = nullptr;
    if (!next_content_line(b, e)) return false;
    const std::size_t n = names_.size();
    const std::size_t cols = for_each_cell(b, e, [&](std::size_t col, const char* cb, const char* ce) {
      if (col == 0) {
        std::int64_t s = 0;
        if (cb == ce) fail("empty step cell (expected an integer step number)");
        if (!detail::parse_int64(cb, ce, s))
          fail("step '" + detail::cell_text(cb, ce) + "' is not an integer");
        if (rows_ > 0 && s <= last_step_)
          fail("step " + std::to_string(s) + " is not greater than the previous step " +
               std::to_string(last_step_) + " (steps must strictly increase)");
        step = s;
      } else if (col <= n) {
        const std::string& name = names_[col - 1];
        if (cb == ce)
          fail("empty cell for unit '" + name + "' (column " + std::to_string(col + 1) + ")");
        float v = 0.0f;
        if (!detail::parse_float(cb, ce, v))
          fail("cell '" + detail::cell_text(cb, ce) + "' for unit '" + name + "' (column " +
               std::to_string(col + 1) + ") is not a number (nan, inf, -inf are allowed)");
        if (v < 0.0f && is_finite(v))
          fail("negative norm " + detail::cell_text(cb, ce) + " for unit '" + name +
               "' (column " + std::to_string(col + 1) + ")");
        norms[col - 1] = v;
      }
    });
    if (cols != n + 1)
      fail("expected " + std::to_string(n + 1) + " cells (step + " + std::to_string(n) +
           " units, as in the header), got " + std::to_string(cols));
    last_step_ = step;
    ++rows_;
    return true;
  }

 private:
  [[noreturn]] void fail(const std::string& msg) const { throw TraceError(line_, msg); }

  // Calls f(column, begin, end) for each comma-separated, trimmed cell of
  // [b, e) (an empty line is one empty cell); returns the number of cells.
  template <class F>
  static std::size_t for_each_cell(const char* b, const char* e, F&& f) {
    std::size_t col = 0;
    for (const char* p = b;; ++col) {
      const char* q = p;
      while (q != e && *q != ',') ++q;
      const char* cb = p;
      const char* ce = q;
      detail::trim(cb, ce);
      f(col, cb, ce);
      if (q == e) return col + 1;
      p = q + 1;
    }
  }

  // The next line that is neither blank nor a '#' comment, trimmed.
  bool next_content_line(const char*& b, const char*& e) {
    while (std::getline(in_, buf_)) {
      ++line_;
      b = buf_.data();
      e = b + buf_.size();
      detail::trim(b, e);
      if (b == e || *b == '#') continue;
      return true;
    }
    if (in_.bad()) throw TraceError(line_ + 1, "read error");
    return false;
  }

  void read_header() {
    const char* b = nullptr;
    const char* e = nullptr;
    if (!next_content_line(b, e))
      throw TraceError(line_ + 1, "empty trace: expected a header line 'step,<unit1>,<unit2>,...'");
    std::unordered_map<std::string, std::size_t> seen;
    for_each_cell(b, e, [&](std::size_t col, const char* cb, const char* ce) {
      if (col == 0) {
        if (std::string(cb, ce) != "step") {
          std::int64_t dummy = 0;
          fail(detail::parse_int64(cb, ce, dummy)
                   ? "missing header: the first line is a data row; expected 'step,<unit1>,...'"
                   : "missing header: the first field must be 'step', got '" +
                         detail::cell_text(cb, ce) + "'");
        }
      } else {
        if (cb == ce) fail("empty unit name in header column " + std::to_string(col + 1));
        std::string name(cb, ce);
        if (name.find('"') != std::string::npos)
          fail("unit name in header column " + std::to_string(col + 1) +
               " contains '\"' (quoted CSV is not supported)");
        if (name.find('\r') != std::string::npos)
          fail("unit name in header column " + std::to_string(col + 1) + " contains a CR");
        const auto it = seen.find(name);
        if (it != seen.end())
          fail("duplicate unit name '" + name + "' in header columns " +
               std::to_string(it->second + 1) + " and " + std::to_string(col + 1));
        seen.emplace(name, col);
        names_.push_back(std::move(name));
      }
    });
    if (names_.empty()) fail("header names no units: expected 'step,<unit1>,<unit2>,...'");
  }

  std::istream& in_;
  std::string buf_;
  std::vector<std::string> names_;
  std::size_t line_ = 0;
  std::size_t rows_ = 0;
  std::int64_t last_step_ = 0;
};

// Reads a whole trace. A header without any data row is an error too.
inline Trace read_trace(std::istream& in) {
  TraceReader r(in);
  Trace t;
  t.names = r.names();
  const std::size_t n = t.names.size();
  std::vector<float> row(n);
  std::int64_t step = 0;
  while (r.next(step, row.data())) {
    t.steps.push_back(step);
    t.norms.insert(t.norms.end(), row.begin(), row.end());
  }
  if (t.steps.empty()) throw TraceError(r.line() + 1, "the trace has a header but no data rows");
  return t;
}

// Writes the same format. Each row is formatted into one string and written
// with one call, so a crash leaves at most one partial line at the end.
class TraceWriter {
 public:
  // write_header = false continues a trace whose header is already in the
  // stream (a file reopened to append: the Python controller moving to
  // another device carries its trace on this way).
  TraceWriter(std::ostream& out, const std::vector<std::string>& names, bool write_header = true)
      : out_(out), n_(names.size()) {
    if (names.empty()) throw std::invalid_argument("gnmr: TraceWriter: no unit names");
    std::unordered_map<std::string, std::size_t> seen;
    line_ = "step";
    for (std::size_t i = 0; i < names.size(); ++i) {
      const std::string& s = names[i];
      if (s.empty() || s.find_first_of(",\"\r\n") != std::string::npos || s.front() == ' ' ||
          s.front() == '\t' || s.back() == ' ' || s.back() == '\t')
        throw std::invalid_argument("gnmr: TraceWriter: unit name " + std::to_string(i) + " '" + s +
                                    "' must be non-empty, without ',', '\"', CR, LF or "
                                    "surrounding blanks");
      if (!seen.emplace(s, i).second)
        throw std::invalid_argument("gnmr: TraceWriter: duplicate unit name '" + s + "'");
      line_ += ',';
      line_ += s;
    }
    line_ += '\n';
    if (write_header) out_.write(line_.data(), static_cast<std::streamsize>(line_.size()));
    line_.reserve(n_ * 16 + 24);
  }

  // Steps must strictly increase (the reader rejects anything else).
  void write(std::int64_t step, const float* norms, std::size_t n) {
    if (n != n_)
      throw std::invalid_argument("gnmr: TraceWriter: expected " + std::to_string(n_) +
                                  " norms, got " + std::to_string(n));
    if (rows_ > 0 && step <= last_step_)
      throw std::invalid_argument("gnmr: TraceWriter: step " + std::to_string(step) +
                                  " is not greater than the previous step " +
                                  std::to_string(last_step_));
    char num[detail::kNumBuf];
    line_.clear();
    line_.append(num, detail::format_int(num, step));
    for (std::size_t i = 0; i < n; ++i) {
      line_ += ',';
      line_.append(num, detail::format_float(num, norms[i]));
    }
    line_ += '\n';
    out_.write(line_.data(), static_cast<std::streamsize>(line_.size()));
    last_step_ = step;
    ++rows_;
  }
  void write(std::int64_t step, const std::vector<float>& norms) {
    write(step, norms.data(), norms.size());
  }
  void flush() { out_.flush(); }
  std::size_t rows_written() const { return rows_; }

 private:
  std::ostream& out_;
  std::size_t n_;
  std::string line_;
  std::size_t rows_ = 0;
  std::int64_t last_step_ = 0;
};

}  // namespace gnmr
