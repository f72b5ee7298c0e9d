// python/gnmr/csrc/module.cpp — gnmr._C, the extension module under the
// Python package: the cores of cores.hpp, the preset table, the flag bits
// and the record layouts, with gnmr's C++ errors as Python exceptions.
//
// Errors keep the library's messages: std::invalid_argument (bad presets,
// overrides, gradients, layouts) and gnmr::StateError / gnmr::TraceError
// (a bad checkpoint blob or trace) are ValueError, gnmr_py::IoError is
// OSError, anything else RuntimeError. The Python layer (gnmr/*.py) adds
// the torch-facing API, documentation and type hints; nothing here is
// public API.
#include <torch/python.h>

#include <ATen/ops/empty.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "cores.hpp"
#include "gnmr/io/state.hpp"
#include "gnmr/io/trace.hpp"
#include "gnmr/presets/make.hpp"

namespace py = pybind11;
using namespace gnmr_py;

namespace {

// --------------------------------------------------------------- overrides ----
// The fields of gnmr::presets::Options, by their C++ names: one list for the
// conversion and for the "valid overrides" message.
#define GNMR_PY_FLOAT_OPTIONS(X) X(tau) X(delta) X(beta) X(kappa) X(max_norm) X(z) X(clip_factor)
#define GNMR_PY_INT_OPTIONS(X) \
  X(warmup) X(window) X(delta_window) X(max_o) X(lock) X(cooldown) X(restart_every) X(systemic_max_grants)
// The systemic and denied-unit rules (docs/algorithm.md): the thresholds are
// doubles in C++ (a share of 0.29 must stay 0.29, not its float), the rest
// floats; the action is a string.
#define GNMR_PY_DOUBLE_OPTIONS(X) X(systemic_share) X(systemic_maxo)
#define GNMR_PY_FLOAT2_OPTIONS(X) X(systemic_kappa) X(systemic_beta) X(deny_kappa) X(rate) X(floor) X(ceiling) X(noise_c)

std::vector<std::string> option_names() {
  std::vector<std::string> v;
#define GNMR_PY_NAME(f) v.push_back(#f);
  GNMR_PY_FLOAT_OPTIONS(GNMR_PY_NAME)
  GNMR_PY_INT_OPTIONS(GNMR_PY_NAME)
#undef GNMR_PY_NAME
  v.push_back("mean");
  v.push_back("systemic_action");
  v.push_back("deny_action");
#define GNMR_PY_NAME(f) v.push_back(#f);
  GNMR_PY_DOUBLE_OPTIONS(GNMR_PY_NAME)
  GNMR_PY_FLOAT2_OPTIONS(GNMR_PY_NAME)
#undef GNMR_PY_NAME
  return v;
}

[[noreturn]] void type_error(const std::string& key, const char* want, const py::handle& v) {
  throw py::type_error("gnmr: override '" + key + "' must be " + want + ", got " +
                       std::string(py::str(py::type::handle_of(v).attr("__name__"))));
}

bool is_bool(const py::handle& v) { return PyBool_Check(v.ptr()); }

gnmr::presets::Options options_from(const py::dict& d) {
  gnmr::presets::Options o;
  for (const auto& kv : d) {
    const std::string key = py::cast<std::string>(kv.first);
    const py::handle v = kv.second;
    bool known = false;
#define GNMR_PY_FLOAT(f)                                                                   \
  if (key == #f) {                                                                         \
    if (is_bool(v) || !(py::isinstance<py::float_>(v) || py::isinstance<py::int_>(v)))     \
      type_error(key, "a number", v);                                                     \
    o.f = static_cast<float>(py::cast<double>(v));                                        \
    known = true;                                                                          \
  }
#define GNMR_PY_INT(f)                                                                      \
  if (key == #f) {                                                                          \
    if (is_bool(v) || !py::isinstance<py::int_>(v)) type_error(key, "an int", v);           \
    try {                                                                                   \
      o.f = py::cast<std::int64_t>(v);                                                      \
    } catch (const py::cast_error&) {                                                       \
      throw std::invalid_argument("gnmr: override '" + key + "' is out of the 64-bit range"); \
    }                                                                                       \
    known = true;                                                                           \
  }
#define GNMR_PY_DOUBLE(f)                                                                  \
  if (key == #f) {                                                                         \
    if (is_bool(v) || !(py::isinstance<py::float_>(v) || py::isinstance<py::int_>(v)))     \
      type_error(key, "a number", v);                                                     \
    o.f = py::cast<double>(v);                                                            \
    known = true;                                                                          \
  }
    GNMR_PY_FLOAT_OPTIONS(GNMR_PY_FLOAT)
    GNMR_PY_FLOAT2_OPTIONS(GNMR_PY_FLOAT)
    GNMR_PY_DOUBLE_OPTIONS(GNMR_PY_DOUBLE)
    GNMR_PY_INT_OPTIONS(GNMR_PY_INT)
#undef GNMR_PY_FLOAT
#undef GNMR_PY_DOUBLE
#undef GNMR_PY_INT
    if (key == "systemic_action") {
      if (!py::isinstance<py::str>(v)) type_error(key, "a str", v);
      o.systemic_action = py::cast<std::string>(v);
      known = true;
    }
    if (key == "deny_action") {
      if (!py::isinstance<py::str>(v)) type_error(key, "a str", v);
      o.deny_action = py::cast<std::string>(v);
      known = true;
    }
    if (key == "mean") {
      if (!py::isinstance<py::str>(v)) type_error(key, "a str", v);
      o.mean = py::cast<std::string>(v);
      known = true;
    }
    if (!known)
      throw std::invalid_argument("gnmr: unknown override '" + key + "'; valid overrides: " +
                                  gnmr::presets::detail::join(option_names()));
  }
  return o;
}

// ----------------------------------------------------------------- records ----
// One list per record type: the Python field names and the conversion.
#define GNMR_PY_SUMMARY_FIELDS(X) \
  X(step) X(triggered) X(granted) X(in_recovery) X(denied) X(nonfinite) X(released) X(max_ratio) \
  X(max_ratio_unit) X(skip_step) X(systemic) X(systemic_scale) X(total_norm) X(total_mean)

py::tuple summary_fields() {
  std::vector<std::string> v;
#define GNMR_PY_NAME(f) v.push_back(#f);
  GNMR_PY_SUMMARY_FIELDS(GNMR_PY_NAME)
#undef GNMR_PY_NAME
  return py::cast(v);
}

py::tuple summary_tuple(const gnmr::StepSummary& s) {
  py::list l;
#define GNMR_PY_FIELD(f) l.append(py::cast(s.f));
  GNMR_PY_SUMMARY_FIELDS(GNMR_PY_FIELD)
#undef GNMR_PY_FIELD
  return py::tuple(l);
}

template <class T>
at::Tensor column(const std::vector<T>& rows, std::size_t n, c10::ScalarType type, std::size_t offset) {
  at::Tensor t = at::empty({static_cast<std::int64_t>(n)}, at::TensorOptions().dtype(type));
  auto* out = static_cast<unsigned char*>(t.data_ptr());
  for (std::size_t i = 0; i < n; ++i)
    std::memcpy(out + 4 * i, reinterpret_cast<const unsigned char*>(&rows[i]) + offset, 4);
  return t;
}

py::tuple decisions_pair(const std::vector<gnmr::UnitDecision>& d) {
  return py::make_tuple(column(d, d.size(), c10::ScalarType::Float, offsetof(gnmr::UnitDecision, scale)),
                        column(d, d.size(), c10::ScalarType::Int, offsetof(gnmr::UnitDecision, flags)));
}

#define GNMR_PY_REPORT_FIELDS(X)                                                                \
  X(norm, Float) X(mean, Float) X(ratio, Float) X(delta, Float) X(risk, Float) X(scale, Float) \
  X(flags, Int) X(lock_left, Int)

py::dict reports_dict(const std::vector<gnmr::UnitReport>& r) {
  py::dict d;
#define GNMR_PY_COLUMN(f, T) \
  d[#f] = column(r, r.size(), c10::ScalarType::T, offsetof(gnmr::UnitReport, f));
  GNMR_PY_REPORT_FIELDS(GNMR_PY_COLUMN)
#undef GNMR_PY_COLUMN
  return d;
}

py::bytes to_bytes(const std::vector<std::uint8_t>& v) {
  return py::bytes(reinterpret_cast<const char*>(v.data()), v.size());
}

gnmr::AdamWParams adamw_params(double lr, double beta1, double beta2, double eps, double wd) {
  gnmr::AdamWParams h;
  h.lr = static_cast<float>(lr);
  h.beta1 = static_cast<float>(beta1);
  h.beta2 = static_cast<float>(beta2);
  h.eps = static_cast<float>(eps);
  h.weight_decay = static_cast<float>(wd);
  const std::string bad = h.check();
  if (!bad.empty()) throw std::invalid_argument(bad);
  return h;
}

py::list states_list(const AdamWStates& s) {
  py::list l;
  for (const auto& u : s) l.append(py::make_tuple(u.step, u.beta1_pow, u.beta2_pow));
  return l;
}

AdamWStates states_from(const std::vector<std::tuple<std::int64_t, double, double>>& l) {
  AdamWStates s;
  s.reserve(l.size());
  for (const auto& t : l) {
    gnmr::AdamWUnitState u;
    u.step = std::get<0>(t);
    u.beta1_pow = std::get<1>(t);
    u.beta2_pow = std::get<2>(t);
    if (u.step < 0 || !(u.beta1_pow >= 0.0 && u.beta1_pow <= 1.0) || !(u.beta2_pow >= 0.0 && u.beta2_pow <= 1.0))
      throw std::invalid_argument("gnmr: AdamW: invalid unit state (step >= 0, beta powers in [0, 1])");
    s.push_back(u);
  }
  return s;
}

// The sharded path's local gradients: None becomes an undefined tensor (no
// gradient, or a replica this rank does not count).
using LocalGrads = std::vector<c10::optional<at::Tensor>>;
std::vector<at::Tensor> local_grads(const LocalGrads& in) {
  std::vector<at::Tensor> out;
  out.reserve(in.size());
  for (const auto& g : in) out.push_back(g.has_value() ? *g : at::Tensor());
  return out;
}

// The float32 vector of num_units partials the sharded path exchanges.
float* partials_of(const at::Tensor& t, std::size_t num_units, bool cuda, const char* what) {
  if (t.scalar_type() != c10::ScalarType::Float || t.dim() != 1 ||
      static_cast<std::size_t>(t.numel()) != num_units || !t.is_contiguous() || t.is_cuda() != cuda)
    throw std::invalid_argument(std::string("gnmr: ") + what + ": a contiguous float32 " +
                                (cuda ? "CUDA" : "CPU") + " tensor of " + std::to_string(num_units) +
                                " partials expected");
  return t.data_ptr<float>();
}

// A step's aux partials (Controller.step(aux=...)): None, or a tensor checked
// as the partials are. The caller keeps it alive for the step.
const float* aux_of(const py::object& aux, std::size_t num_units, bool cuda) {
  if (aux.is_none()) return nullptr;
  return partials_of(py::cast<at::Tensor>(aux), num_units, cuda, "aux");
}

GradTable grad_table(std::vector<at::Tensor> params, std::vector<std::uint32_t> units,
                     std::vector<std::string> labels, std::size_t num_units) {
  return GradTable(std::move(params), std::move(units), std::move(labels), num_units);
}

py::dict flags_dict() {
  py::dict d;
  d["TRIGGERED"] = static_cast<std::uint32_t>(gnmr::kTriggered);
  d["GRANTED"] = static_cast<std::uint32_t>(gnmr::kGranted);
  d["IN_RECOVERY"] = static_cast<std::uint32_t>(gnmr::kInRecovery);
  d["DENIED"] = static_cast<std::uint32_t>(gnmr::kDenied);
  d["COOLDOWN"] = static_cast<std::uint32_t>(gnmr::kCooldown);
  d["NONFINITE"] = static_cast<std::uint32_t>(gnmr::kNonFinite);
  d["SKIP"] = static_cast<std::uint32_t>(gnmr::kSkip);
  d["RESET_MOMENTS"] = static_cast<std::uint32_t>(gnmr::kResetMoments);
  d["PROMOTE"] = static_cast<std::uint32_t>(gnmr::kPromote);
  d["RELEASED"] = static_cast<std::uint32_t>(gnmr::kReleased);
  d["WARMUP"] = static_cast<std::uint32_t>(gnmr::kWarmup);
  d["ZERO_NORM"] = static_cast<std::uint32_t>(gnmr::kZeroNorm);
  d["SYSTEMIC"] = static_cast<std::uint32_t>(gnmr::kSystemic);
  d["RESTART"] = static_cast<std::uint32_t>(gnmr::kRestart);
  return d;
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "gnmr's C++ core (private: use the gnmr package)";

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const gnmr::StateError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const gnmr::TraceError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const IoError& e) {
      PyErr_SetString(PyExc_OSError, e.what());
    }
  });

  m.def("presets", &gnmr::presets::names);
  m.def("is_global", &gnmr::presets::is_global);
  m.def("preset_overrides", [](const std::string& name) { return gnmr::presets::overrides_of(name); });
  m.def("option_names", &option_names);
  m.def("check_options", [](const std::string& preset, const py::dict& o) {
    gnmr::presets::make(preset, 1, options_from(o));
  });
  m.def("flags", &flags_dict);
  m.def("summary_fields", &summary_fields);
  m.def("cuda_built", &cuda_built);
  m.def("check_adamw", [](double lr, double b1, double b2, double eps, double wd) {
    adamw_params(lr, b1, b2, eps, wd);
  });
  m.attr("STATE_FORMAT_VERSION") = gnmr::kStateFormatVersion;
  m.attr("READBACK_SLOTS") = kReadbackSlots;
  m.attr("VERSION") = std::to_string(GNMR_VERSION_MAJOR) + "." + std::to_string(GNMR_VERSION_MINOR) + "." +
                      std::to_string(GNMR_VERSION_PATCH);

  py::class_<HostCore>(m, "HostCore")
      .def(py::init([](const std::string& preset, const py::dict& o, std::vector<at::Tensor> params,
                       std::vector<std::uint32_t> units, std::vector<std::string> labels,
                       std::vector<std::string> names) {
        const std::size_t n = names.size();
        return new HostCore(preset, options_from(o), grad_table(std::move(params), std::move(units), std::move(labels), n),
                            std::move(names));
      }))
      .def("step", [](HostCore& c, bool apply, const py::object& aux) {
        const float* a = aux_of(aux, c.num_units(), false);
        if (apply) return summary_tuple(c.step(true, a));
        gnmr::StepSummary s;
        {
          // Nothing here touches a Python object (no gradient is dropped).
          py::gil_scoped_release release;
          s = c.step(false, a);
        }
        return summary_tuple(s);
      }, py::arg("apply"), py::arg("aux") = py::none())
      .def("local_partials", [](HostCore& c, const LocalGrads& g, const at::Tensor& out) {
        float* o = partials_of(out, c.num_units(), false, "local_partials");
        const std::vector<at::Tensor> grads = local_grads(g);
        py::gil_scoped_release release;
        c.local_partials(&grads, o);
      })
      .def("step_reduced", [](HostCore& c, const at::Tensor& p, const py::object& aux) {
        const float* d = partials_of(p, c.num_units(), false, "step_reduced");
        const float* a = aux_of(aux, c.num_units(), false);
        gnmr::StepSummary s;
        {
          py::gil_scoped_release release;
          s = c.step_reduced(d, a);
        }
        return summary_tuple(s);
      }, py::arg("partials"), py::arg("aux") = py::none())
      .def_property_readonly("needs_aux", &HostCore::needs_aux)
      .def("summary", [](const HostCore& c) { return summary_tuple(c.summary()); })
      .def("decisions", [](const HostCore& c) { return decisions_pair(c.decisions()); })
      .def("reports", [](const HostCore& c) { return reports_dict(c.reports()); })
      .def("save", [](const HostCore& c) { return to_bytes(c.save()); })
      .def("load", [](HostCore& c, const py::bytes& b) { c.load(std::string(b)); })
      .def("reset", &HostCore::reset)
      .def_property_readonly("steps_done", &HostCore::steps_done)
      .def_property_readonly("name", &HostCore::name)
      .def_property_readonly("max_in_recovery", &HostCore::max_in_recovery)
      .def_property_readonly("num_units", &HostCore::num_units)
      .def("open_events", [](HostCore& c, const std::string& p, bool null,
                             bool append) { c.logs().open_events(p, null, append); },
           py::arg("path"), py::arg("nonfinite_as_null"), py::arg("append") = false)
      .def("close_events", [](HostCore& c) { c.logs().close_events(); })
      .def("open_trace", [](HostCore& c, const std::string& p, bool append, std::int64_t last,
                            const std::string& aux) { c.logs().open_trace(p, append, last, aux); },
           py::arg("path"), py::arg("append") = false, py::arg("last_step") = 0, py::arg("aux") = "")
      .def_property_readonly("last_trace_step", [](HostCore& c) { return c.logs().last_trace_step(); })
      .def("close_trace", [](HostCore& c) { c.logs().close_trace(); })
      .def("flush", [](HostCore& c) { c.logs().flush(); });

  py::class_<CudaCore>(m, "CudaCore")
      .def(py::init([](const std::string& preset, const py::dict& o, std::vector<at::Tensor> params,
                       std::vector<std::uint32_t> units, std::vector<std::string> labels,
                       std::vector<std::string> names, int device) {
        const std::size_t n = names.size();
        return new CudaCore(preset, options_from(o), grad_table(std::move(params), std::move(units), std::move(labels), n),
                            names, device);
      }))
      .def("capturing", &CudaCore::capturing)
      .def("prepare", &CudaCore::prepare)
      .def("step", [](CudaCore& c, std::uintptr_t stream, bool apply, const py::object& aux) {
        return c.step(stream, apply, aux_of(aux, c.device().num_units(), true));
      }, py::arg("stream"), py::arg("apply"), py::arg("aux") = py::none())
      .def_property_readonly("needs_aux", [](const CudaCore& c) { return c.device().needs_aux(); })
      .def("local_partials", [](CudaCore& c, const LocalGrads& g, const at::Tensor& out, std::uintptr_t stream) {
        c.local_partials(local_grads(g), partials_of(out, c.device().num_units(), true, "local_partials"), stream);
      })
      .def("step_reduced", [](CudaCore& c, const at::Tensor& p, std::uintptr_t stream, const py::object& aux) {
        return c.step_reduced(partials_of(p, c.device().num_units(), true, "step_reduced"), stream,
                              aux_of(aux, c.device().num_units(), true));
      }, py::arg("partials"), py::arg("stream"), py::arg("aux") = py::none())
      .def("next_slot", [](const CudaCore& c) { return c.device().next_slot(); })
      .def("ready", [](const CudaCore& c, int s) { return c.device().ready(s); })
      .def("slot_summary", [](const CudaCore& c, int s) {
        c.device().wait(s);
        return summary_tuple(c.device().slot_summary(s));
      })
      .def("copy_summary", [](const CudaCore& c) { return summary_tuple(c.device().copy_summary()); })
      .def("decisions", [](CudaCore& c) { return decisions_pair(c.decisions()); })
      .def("reports", [](const CudaCore& c) { return reports_dict(c.device().copy_reports()); })
      .def("save", [](const CudaCore& c) { return to_bytes(c.device().save()); })
      .def("load", [](CudaCore& c, const py::bytes& b) { c.load(std::string(b)); })
      .def("reset", [](CudaCore& c) { c.device().reset(); })
      .def_property_readonly("steps_done", [](const CudaCore& c) { return c.device().steps_done(); })
      .def_property_readonly("name", [](const CudaCore& c) { return c.device().name(); })
      .def_property_readonly("max_in_recovery", [](const CudaCore& c) { return c.device().max_in_recovery(); })
      .def_property_readonly("num_units", [](const CudaCore& c) { return c.device().num_units(); })
      .def_property_readonly("replans", &CudaCore::replans)
      .def_property_readonly("events_dropped", [](const CudaCore& c) { return c.device().events_dropped(); })
      .def("open_events", [](CudaCore& c, const std::string& p, bool null,
                             bool append) { c.device().open_events(p, null, append); },
           py::arg("path"), py::arg("nonfinite_as_null"), py::arg("append") = false)
      .def("close_events", [](CudaCore& c) { c.device().close_events(); })
      .def("open_trace",
           [](CudaCore& c, const std::string& p, bool append, std::int64_t last, const std::string& aux) {
             // The device writes its trace rows a step late from pinned
             // copies of the reports' norms and of the controller's
             // finished aux norms (drains.cuh).
             c.device().open_trace(p, append, last, aux);
           },
           py::arg("path"), py::arg("append") = false, py::arg("last_step") = 0, py::arg("aux") = "")
      .def("close_trace", [](CudaCore& c) { c.device().close_trace(); })
      .def_property_readonly("last_trace_step", [](CudaCore& c) { return c.device().last_trace_step(); })
      .def("flush", [](CudaCore& c) { c.device().flush(); });

  py::class_<HostAdamW>(m, "HostAdamW")
      .def(py::init([](std::vector<at::Tensor> p, std::vector<std::uint32_t> u, std::vector<at::Tensor> m1,
                       std::vector<at::Tensor> m2, std::vector<std::string> labels, std::size_t n) {
        return new HostAdamW(AdamWTable(std::move(p), std::move(u), std::move(m1), std::move(m2), std::move(labels)), n);
      }))
      .def("prepare", [](HostAdamW& a, const c10::optional<LocalGrads>& g) {
        if (!g) return a.prepare();
        const std::vector<at::Tensor> grads = local_grads(*g);
        a.prepare(&grads);
      }, py::arg("grads") = py::none())
      .def("step", [](HostAdamW& a, const HostCore& c, double lr, double b1, double b2, double eps, double wd) {
        const gnmr::AdamWParams h = adamw_params(lr, b1, b2, eps, wd);
        py::gil_scoped_release release;
        a.step(c, h);
      })
      .def("states", [](const HostAdamW& a) { return states_list(a.states()); })
      .def("set_states", [](HostAdamW& a, const std::vector<std::tuple<std::int64_t, double, double>>& s) {
        a.set_states(states_from(s));
      });

  py::class_<CudaAdamW>(m, "CudaAdamW")
      .def(py::init([](std::vector<at::Tensor> p, std::vector<std::uint32_t> u, std::vector<at::Tensor> m1,
                       std::vector<at::Tensor> m2, std::vector<std::string> labels, std::size_t n, int device) {
        return new CudaAdamW(AdamWTable(std::move(p), std::move(u), std::move(m1), std::move(m2), std::move(labels)), n,
                             device);
      }))
      .def("prepare", [](CudaAdamW& a, std::uintptr_t stream, const c10::optional<LocalGrads>& g) {
        if (!g) return a.prepare(stream);
        const std::vector<at::Tensor> grads = local_grads(*g);
        a.prepare(stream, &grads);
      }, py::arg("stream"), py::arg("grads") = py::none())
      .def("step", [](CudaAdamW& a, const CudaCore& c, double lr, double b1, double b2, double eps, double wd,
                      std::uintptr_t d_lr, std::uintptr_t stream) {
        a.step(c, adamw_params(lr, b1, b2, eps, wd), reinterpret_cast<const float*>(d_lr), stream);
      })
      .def("states", [](const CudaAdamW& a) { return states_list(a.states()); })
      .def("set_states", [](CudaAdamW& a, const std::vector<std::tuple<std::int64_t, double, double>>& s) {
        a.set_states(states_from(s));
      });
}
