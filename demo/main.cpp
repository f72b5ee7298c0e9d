// gnmr-demo — a real low-precision training run that gnmr keeps stable, and
// the stability benchmark built on it (docs/record/stability.md).
//
// Two modes of one program:
//   --scenario ...    the benchmark suite: (scenario, arm, seed) runs in
//                     parallel processes, cached, scored and compared
//                     (suite.hpp, suite_report.hpp, docs/record/stability.md);
//   otherwise         the original comparison: one run per --controllers
//                     entry on one seed, a table, CSVs and a picture
//                     (report.hpp, docs/record/demo.md).
// A third, internal mode (--run-one) is one suite run in its own process.
//
// One translation unit on purpose: libtorch headers take most of a minute to
// compile, and the demo's pieces are small headers next to this file.
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "data.hpp"
#include "report.hpp"
#include "suite_plot.hpp"
#include "suite_report.hpp"
#include "train.hpp"

namespace {

const char* kUsage = R"(gnmr-demo: low-precision training of a small character-level transformer.

Benchmark suite (docs/record/stability.md):
  gnmr-demo --scenario LIST --arms LIST --seeds LIST --out DIR [--jobs N] [settings]
  --scenario LIST   comma-separated, or all: lr-burst, operator-outliers,
                    fp4-gradients, grad-faults; by name only (no events:
                    false alarms): clean, clean-faults; nvfp4-recipe
                    (NVIDIA's NVFP4 recipe, CPU only: the gap to close)
  --arms LIST       comma-separated, or all (default; without `clip` while
                    the recipe clips, without arms this gnmr build lacks):
                    low, high, gnmr, gnmr-promote, gnmr-clip, gnmr-systemic,
                    random-at-triggers, random, fixed-list, clip, zclip,
                    adagc, spam, skip-step, stabilizer, stabilizer-high,
                    stabilizer+gnmr-promote, stabilizer+gnmr,
                    stabilizer+random, gnmr-calibrated,
                    stabilizer+gnmr-calibrated, default, default-random;
                    by name only (scenario nvfp4-recipe): static-layers,
                    late-switch, noise-floor, noise-floor-random
  --seeds LIST      e.g. 1,2,3 or 1-5 (default 1). Seeds 1-5 are the
                    development seeds, 6-10 the report's (docs/record/stability.md)
  --jobs N          runs in parallel, one process and one thread each (default 1)
  --out DIR         results.csv, summary.csv, <scenario>.png, and the run
                    cache DIR/runs/ (an interrupted suite resumes from it)

Original comparison (docs/record/demo.md):
  --controllers LIST  comma-separated presets (default:
                      none,clip,zclip,adagc,spam,skip-step,stabilizer,gnmr;
                      also gnmr-ladder, gnmr-promote, gnmr-clip, and layered
                      controllers outer+inner such as clip+gnmr or
                      stabilizer+gnmr, on either device)
  --stress S          none | fp8 | fp4: E4M3 / E2M1 quantize-dequantize of every
                      linear layer's input, per-tensor current scale (default fp4)
  --seed N            seed of init, batches and faults (default 1)
  --no-baseline       skip the unstressed reference run
  --threads N         torch CPU threads (default 1)
  --out DIR           output directory (default gnmr-demo-out)
  Its defaults: 2 GELU blocks, lr 1e-2, fault rate 0.05, no recipe clip,
  validation in the training format.

Settings (both modes; in a suite they override the scenario's and are part
of every run's cache key):
)";

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> v;
  std::stringstream ss(s);
  std::string x;
  while (std::getline(ss, x, ','))
    if (!x.empty()) v.push_back(x);
  return v;
}

std::vector<std::uint64_t> parse_seeds(const std::string& s) {
  std::vector<std::uint64_t> v;
  for (const auto& part : split(s)) {
    const auto dash = part.find('-', 1);
    const long a = demo::to_long("--seeds", part.substr(0, dash), 0, 1L << 62);
    const long b = dash == std::string::npos ? a : demo::to_long("--seeds", part.substr(dash + 1), a, 1L << 62);
    for (long x = a; x <= b; ++x) v.push_back(static_cast<std::uint64_t>(x));
  }
  if (v.empty()) throw std::invalid_argument("--seeds is empty");
  return v;
}

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

std::string self_exe() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw std::runtime_error("cannot find this executable (/proc/self/exe)");
  return std::string(buf, static_cast<std::size_t>(n));
}

void check_device(const std::string& device) {
  if (device != "cuda") return;
  if (!demo::CudaBackend::built())
    throw std::runtime_error("--device cuda: this gnmr-demo was built without nvcc, so without gnmr's CUDA step");
  if (!torch::cuda::is_available())
    throw std::runtime_error("--device cuda: this libtorch sees no CUDA device (torch::cuda::is_available() is false)");
}

// --run-one SCENARIO ARM SEED --run-dir D --run-key K [--dep-dir D] settings
int run_one(const std::vector<std::string>& a, const demo::Overrides& ov, const std::string& dir,
            const std::string& key, const std::string& dep_dir) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::uint64_t seed = static_cast<std::uint64_t>(demo::to_long("--run-one", a[2], 0, 1L << 62));
  demo::RunConfig cfg = demo::build_config(a[0], a[1], seed, ov);
  cfg.keep_unit_trace = true;  // not part of the key: it changes no result
  if (demo::run_key(cfg) != key)
    throw std::logic_error("--run-one: the configuration's key is " + demo::run_key(cfg) + ", not " + key);
  check_device(cfg.device);
  demo::RunInputs in;
  if (!cfg.arm.depends_on.empty()) {
    const auto d = demo::read_result(dep_dir, demo::build_config(a[0], cfg.arm.depends_on, seed, ov));
    in.episodes = demo::episodes_from(d);
    in.hp_share = demo::field(d, "hp_share");
  }
  torch::set_num_threads(1);
  std::cout << demo::canonical(cfg) << std::flush;
  const demo::Corpus corpus = demo::load_corpus(cfg.data);
  const demo::RunResult r = demo::train_one(corpus, cfg, in);
  const std::string tmp = dir + ".tmp-" + std::to_string(getpid());
  std::filesystem::remove_all(tmp);
  std::filesystem::create_directories(tmp);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  demo::write_result(tmp, cfg, r, cpu_seconds(), wall);
  std::error_code ec;
  std::filesystem::rename(tmp, dir, ec);
  if (ec) std::filesystem::remove_all(tmp);  // another process got there first: same bits
  std::cout << "final val " << r.final_val << ", " << wall << " s\n";
  return 0;
}

int suite(std::vector<std::string> scenarios, std::vector<std::string> arms, const std::vector<std::uint64_t>& seeds,
          const demo::Overrides& ov, const std::string& out, int jobs) {
  const auto t0 = std::chrono::steady_clock::now();
  if (scenarios.size() == 1 && scenarios[0] == "all") {
    scenarios.clear();
    for (const auto& s : demo::scenario_table())
      if (s.stressed) scenarios.push_back(s.name);  // the clean recipes are asked for by name
  }
  for (const auto& s : scenarios) demo::find_scenario(s);
  const bool all_arms = arms.empty() || (arms.size() == 1 && arms[0] == "all");
  std::vector<std::string> order;
  for (const auto& a : demo::arm_table()) order.push_back(a.name);
  if (all_arms) {
    arms.clear();
    for (const auto& a : demo::arm_table()) {
      if (!demo::arm_available(a) || demo::nvfp4_arm(a)) continue;
      if (a.name == "clip" && demo::build_config(scenarios[0], "low", seeds[0], ov).recipe_clip > 0) continue;
      arms.push_back(a.name);
    }
  }
  for (const auto& a : arms) {
    demo::find_arm(a);
    if (a == "clip" && demo::build_config(scenarios[0], "low", seeds[0], ov).recipe_clip > 0)
      std::cerr << "note: arm clip with the recipe's clip on is the low arm again\n";
  }
  for (auto s : seeds)
    if (s >= 6 && s <= 10)
      std::cerr << "note: seeds 6-10 are the report's held-out seeds (docs/record/stability.md, Protocol)\n";
  check_device(demo::build_config(scenarios[0], "low", seeds[0], ov).device);  // before any run starts
  std::filesystem::create_directories(out);
  demo::Plan plan = demo::make_plan(scenarios, arms, seeds, ov, out);
  const int failed = demo::run_plan(plan, jobs, ov, self_exe());
  const auto rows = demo::collect(plan, ov);
  demo::write_results_csv(out + "/results.csv", rows);
  std::ofstream csv(out + "/summary.csv");
  csv << demo::kSummaryHeader;
  std::string pngs;
  for (const auto& s : scenarios) {
    demo::summarize(std::cout, csv, s, rows, order);
    const std::string png = demo::plot_scenario(out, s, rows, order);
    if (!png.empty()) pngs += " " + png;
  }
  double cpu = 0;
  for (const auto& r : rows) cpu += demo::field(r.r, "cpu_s");
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "\n(val: final validation loss, mean+-std over seeds; d(x): paired difference to arm x, "
               "mean [95% bootstrap interval, from 10 seeds up], then seeds better/worse; gap closed: mean(L_low-L) / "
               "mean(L_low-L_high) [interval]; hp%/hpF%: "
               "high-precision operator-steps / GEMM FLOPs; spk: loss spikes; score%: spike score; "
               "recov%: unit-steps in recovery; detP/detR: detection precision / recall)\n"
            << "wrote " << out << "/results.csv, summary.csv" << pngs << "; " << rows.size() << " runs, "
            << demo::num(cpu, 0) << " cpu-s in their own processes, this invocation " << demo::num(wall, 0)
            << " s wall\n";
  if (failed) std::cerr << "gnmr-demo: " << failed << " run(s) failed\n";
  return failed ? 1 : 0;
}

int legacy(demo::RunConfig rc, std::vector<std::string> controllers, bool baseline, int threads,
           const std::string& out, const std::string& stress) {
  for (const auto& c : controllers) demo::make_controller(c, 2, {});  // validates the names
  check_device(rc.device);
  torch::set_num_threads(threads);
  std::filesystem::create_directories(out);
  const demo::Corpus corpus = demo::load_corpus(rc.data);
  const std::string setup =
      std::to_string(rc.model.layers) + " layers, width " + std::to_string(rc.model.width) + ", ctx " +
      std::to_string(rc.model.ctx) + ", batch " + std::to_string(rc.batch) + ", " + std::to_string(rc.steps) +
      " steps, stress " + stress + ", fault rate " + demo::num(rc.fault_rate, 3) + ", seed " + std::to_string(rc.seed);
  std::cout << "gnmr-demo: " << corpus.files << " file(s), " << corpus.bytes << " bytes, vocab " << corpus.vocab
            << " (train " << corpus.train.size() << " / val " << corpus.val.size() << " tokens); " << setup
            << "; device " << rc.device << ", " << threads << " thread(s)\n";
  std::vector<demo::RunResult> runs;
  const auto t_all = std::chrono::steady_clock::now();
  auto run = [&](demo::RunConfig c) {
    const auto t0 = std::chrono::steady_clock::now();
    runs.push_back(demo::train_one(corpus, c));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::cerr << "  " << runs.back().label << ": " << demo::num(s, 1) << " s, final val "
              << demo::num(runs.back().final_val) << "\n";
  };
  const gnmr::presets::Options given = rc.arm.overrides;
  if (baseline) {
    demo::RunConfig c = rc;
    c.arm = demo::ArmDef{"unstressed-none", "none"};
    c.quant = demo::QuantConfig{};
    c.fault_rate = 0.0;
    run(c);
  }
  for (const auto& name : controllers) {
    demo::RunConfig c = rc;
    c.arm.overrides = given;
    demo::merge_arm(c, demo::ArmDef{name, name});
    c.keep_unit_trace = true;
    run(c);
  }
  const double total_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_all).count();
  const double base_val = baseline ? runs.front().final_val : NAN;
  std::cout << "\n";
  demo::print_table(std::cout, runs, base_val);
  std::cout << "(val/unstr: final val loss / the unstressed fp32 run's; spikes: train loss > "
            << demo::num(100 * demo::kSpikeFrac, 0) << "% above the median of the previous " << demo::kSpikeWindow
            << " steps; recov%: unit-steps in recovery; share: controller time / step time)\n";
  demo::write_summary_csv(out + "/summary.csv", runs);
  demo::write_steps_csv(out + "/steps.csv", runs);
  const demo::RunResult* heat = nullptr;
  for (const auto& r : runs) {
    if (r.norms.empty()) continue;
    demo::write_trace_csv(out + "/trace_" + r.label + ".csv", r);
    if (!heat && r.controller == "gnmr") heat = &r;
  }
  const std::string png = demo::plot(out, runs, heat, "gnmr-demo: " + setup);
  std::cout << "wrote " << out << "/summary.csv, steps.csv, trace_<controller>.csv"
            << (png.empty() ? " (no picture: gnuplot missing or failed)" : ", demo.png") << " in "
            << demo::num(total_s, 1) << " s\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) try {
  // The legacy comparison's defaults (docs/record/demo.md).
  demo::RunConfig rc;
  rc.quant.fwd_x = demo::Fmt::kE2M1;
  rc.quant.wgrad = true;  // dW from the quantized input: the old straight-through estimator
  rc.fault_rate = 0.05;
  rc.recipe_clip = 0.0;
  rc.eval_train_format = true;  // the original demo evaluated in the training format
  std::string stress = "fp4";
  std::vector<std::string> controllers = {"none", "clip", "zclip", "adagc", "spam", "skip-step", "stabilizer", "gnmr"};
  std::vector<std::string> scenarios, arms, run_one_args;
  std::vector<std::uint64_t> seeds = {1};
  demo::Overrides ov;
  std::string out = "gnmr-demo-out", run_dir, run_key, dep_dir;
  int threads = 1, jobs = 1;
  bool baseline = true;

  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::cout << kUsage;
      for (const auto& s : demo::settings()) std::printf("  %-18s  %s\n", s.flag, s.help);
      std::printf("\nScenarios:\n");
      for (const auto& s : demo::scenario_table()) std::printf("  %-18s  %s\n", s.name, s.what);
      std::printf("\nArms:\n");
      for (const auto& x : demo::arm_table())
        std::printf("  %-18s  %s%s\n", x.name.c_str(), x.what.c_str(), demo::arm_available(x) ? "" : " [not in this build]");
      return 0;
    }
    if (a == "--no-baseline") {
      baseline = false;
      continue;
    }
    if (a == "--run-one") {
      if (i + 3 >= argc) throw std::invalid_argument("--run-one needs SCENARIO ARM SEED");
      run_one_args = {argv[i + 1], argv[i + 2], argv[i + 3]};
      i += 3;
      continue;
    }
    if (a.rfind("--", 0) != 0 || i + 1 >= argc)
      throw std::invalid_argument("unknown or incomplete argument '" + a + "' (see --help)");
    const std::string v = argv[++i];
    if (const demo::Setting* s = demo::find_setting(a)) {
      s->set(rc, v);  // validates now; a suite re-applies it to each run's config
      ov.emplace_back(a, v);
    } else if (a == "--controllers") controllers = split(v);
    else if (a == "--stress") {
      if (v != "none" && v != "fp8" && v != "fp4") throw std::invalid_argument("--stress must be none, fp8 or fp4, got '" + v + "'");
      stress = v;
      rc.quant.fwd_x = v == "none" ? demo::Fmt::kNone : v == "fp8" ? demo::Fmt::kE4M3 : demo::Fmt::kE2M1;
    } else if (a == "--seed") rc.seed = static_cast<std::uint64_t>(demo::to_long(a, v, 0, 1L << 62));
    else if (a == "--threads") threads = static_cast<int>(demo::to_long(a, v, 1, 256));
    else if (a == "--out") out = v;
    else if (a == "--scenario") scenarios = split(v);
    else if (a == "--arms") arms = split(v);
    else if (a == "--seeds") seeds = parse_seeds(v);
    else if (a == "--jobs") jobs = static_cast<int>(demo::to_long(a, v, 1, 256));
    else if (a == "--run-dir") run_dir = v;
    else if (a == "--run-key") run_key = v;
    else if (a == "--dep-dir") dep_dir = v;
    else throw std::invalid_argument("unknown argument '" + a + "' (see --help)");
  }
  if (!run_one_args.empty()) return run_one(run_one_args, ov, run_dir, run_key, dep_dir);
  if (!scenarios.empty()) return suite(scenarios, arms, seeds, ov, out, jobs);
  if (!arms.empty()) throw std::invalid_argument("--arms needs --scenario (see --help)");
  if (rc.model.width % rc.model.heads != 0) throw std::invalid_argument("--width must be a multiple of 4");
  if (!(rc.fault_rate >= 0 && rc.fault_rate <= 1)) throw std::invalid_argument("--fault-rate must be in [0, 1]");
  if (controllers.empty()) throw std::invalid_argument("--controllers is empty");
  return legacy(rc, controllers, baseline, threads, out, stress);
} catch (const std::exception& e) {
  std::cerr << "gnmr-demo: " << e.what() << "\n";
  return 2;
}
