// gnmr-demo — a real low-precision training run that gnmr keeps stable.
//
// Trains a small character-level transformer (libtorch) on the fortunes
// text once per controller, under emulated FP8/FP4 activations and injected
// gradient faults, with every controller coming from gnmr::presets::make;
// then prints a comparison table and writes CSVs and a picture. See
// docs/demo.md for the set-up, the definitions and a recorded run.
//
// One translation unit on purpose: libtorch headers take most of a minute to
// compile, and the demo's pieces are small headers next to this file.
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "data.hpp"
#include "model.hpp"
#include "quant.hpp"
#include "report.hpp"
#include "train.hpp"

namespace {

const char* kUsage = R"(gnmr-demo: low-precision training of a small character-level transformer,
once per gradient controller, with every controller from gnmr::presets.

  --controllers LIST  comma-separated presets (default:
                      none,clip,zclip,adagc,spam,skip-step,stabilizer,gnmr;
                      gnmr-ladder is also accepted, and on the CPU a layered
                      <global>+<per-unit> pair such as clip+gnmr: both rules)
  --stress S          none | fp8 | fp4: emulated E4M3 / E2M1 quantize-dequantize
                      of every linear layer's input, per-tensor scale (default fp4)
  --fault-rate R      probability per step of a fault in one random unit (default 0.05)
  --fault-kind K      scale | nan | mixed (default mixed: 3/4 scale, 1/4 NaN/Inf)
  --fault-factor F    gradient multiplier of a scale fault (default 1000)
  --steps N           optimizer steps per controller (default 300)
  --seed N            seed of init, batches and fault schedule (default 1)
  --layers N          transformer blocks (default 2)
  --width N           model width, a multiple of 4 (default 64)
  --batch N           sequences per batch, context 64 (default 16)
  --lr X              peak AdamW learning rate (default 1e-2)
  --beta2 X           AdamW beta2 (default 0.95)
  --max-o N           gnmr presets: units in recovery at once (default: preset's, 4)
  --gnmr-warmup N     gnmr presets: samples before a verdict (default: preset's, 10)
  --data PATH         a text file, or a directory of text files
                      (default /usr/share/games/fortunes)
  --out DIR           output directory (default gnmr-demo-out)
  --device D          cpu | cuda (default cpu); cuda runs gnmr's CUDA backend:
                      device norms, device controller, fused guarded AdamW
  --threads N         torch CPU threads (default 1)
  --no-baseline       skip the unstressed reference run
  --help              this text

Writes DIR/summary.csv, DIR/steps.csv, DIR/trace_<controller>.csv and, with
gnuplot installed, DIR/demo.png; prints the comparison table.
)";

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> v;
  std::stringstream ss(s);
  std::string x;
  while (std::getline(ss, x, ','))
    if (!x.empty()) v.push_back(x);
  return v;
}

long to_long(const std::string& flag, const std::string& v, long lo, long hi) {
  std::size_t pos = 0;
  long x = 0;
  try {
    x = std::stol(v, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  if (pos != v.size() || v.empty() || x < lo || x > hi)
    throw std::invalid_argument(flag + " needs an integer in [" + std::to_string(lo) + ", " +
                                std::to_string(hi) + "], got '" + v + "'");
  return x;
}

double to_double(const std::string& flag, const std::string& v) {
  std::size_t pos = 0;
  double x = 0;
  try {
    x = std::stod(v, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  if (pos != v.size() || v.empty() || !std::isfinite(x))
    throw std::invalid_argument(flag + " needs a number, got '" + v + "'");
  return x;
}

}  // namespace

int main(int argc, char** argv) try {
  demo::RunConfig rc;
  rc.stress = demo::Stress::kFp4;
  rc.fault_rate = 0.05;
  demo::ModelConfig mc;
  std::vector<std::string> controllers = {"none",      "clip",       "zclip", "adagc", "spam",
                                          "skip-step", "stabilizer", "gnmr"};
  std::string data = "/usr/share/games/fortunes", out = "gnmr-demo-out", device = "cpu";
  int threads = 1;
  bool baseline = true;

  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::cout << kUsage;
      return 0;
    }
    if (a == "--no-baseline") {
      baseline = false;
      continue;
    }
    if (a.rfind("--", 0) != 0 || i + 1 >= argc)
      throw std::invalid_argument("unknown or incomplete argument '" + a + "' (see --help)");
    const std::string v = argv[++i];
    if (a == "--controllers") controllers = split(v);
    else if (a == "--stress") rc.stress = demo::parse_stress(v);
    else if (a == "--fault-rate") rc.fault_rate = to_double(a, v);
    else if (a == "--fault-kind") rc.fault_kind = demo::parse_fault_kind(v);
    else if (a == "--fault-factor") rc.fault_factor = to_double(a, v);
    else if (a == "--steps") rc.steps = static_cast<int>(to_long(a, v, 1, 10000000));
    else if (a == "--seed") rc.seed = static_cast<std::uint64_t>(to_long(a, v, 0, 1L << 62));
    else if (a == "--layers") mc.layers = static_cast<int>(to_long(a, v, 1, 64));
    else if (a == "--width") mc.width = static_cast<int>(to_long(a, v, 4, 4096));
    else if (a == "--batch") rc.batch = static_cast<int>(to_long(a, v, 1, 4096));
    else if (a == "--lr") rc.lr = to_double(a, v);
    else if (a == "--beta2") rc.beta2 = to_double(a, v);
    else if (a == "--max-o") rc.max_o = to_long(a, v, 1, 1000000);
    else if (a == "--gnmr-warmup") rc.gnmr_warmup = to_long(a, v, 0, 1000000);
    else if (a == "--data") data = v;
    else if (a == "--out") out = v;
    else if (a == "--device") device = v;
    else if (a == "--threads") threads = static_cast<int>(to_long(a, v, 1, 256));
    else throw std::invalid_argument("unknown argument '" + a + "' (see --help)");
  }
  if (mc.width % mc.heads != 0) throw std::invalid_argument("--width must be a multiple of 4");
  if (!(rc.fault_rate >= 0 && rc.fault_rate <= 1)) throw std::invalid_argument("--fault-rate must be in [0, 1]");
  if (controllers.empty()) throw std::invalid_argument("--controllers is empty");
  for (const auto& c : controllers) {  // validates the names
    const demo::Layers l = demo::parse_layers(c);
    (void)gnmr::presets::is_global(l.inner);
    if (!l.outer.empty() && device != "cpu")
      throw std::invalid_argument("layered controllers ('" + c + "') run on --device cpu only");
  }
  if (device == "cuda") {
    if (!demo::CudaBackend::built())
      throw std::runtime_error("--device cuda: this gnmr-demo was built without nvcc, so without gnmr's CUDA step");
    if (!torch::cuda::is_available())
      throw std::runtime_error("--device cuda: this libtorch sees no CUDA device (torch::cuda::is_available() is false)");
    rc.device = torch::Device(torch::kCUDA);
  } else if (device != "cpu") {
    throw std::invalid_argument("--device must be cpu or cuda, got '" + device + "'");
  }
  torch::set_num_threads(threads);
  std::filesystem::create_directories(out);

  const demo::Corpus corpus = demo::load_corpus(data);
  const std::string setup =
      std::to_string(mc.layers) + " layers, width " + std::to_string(mc.width) + ", ctx " +
      std::to_string(mc.ctx) + ", batch " + std::to_string(rc.batch) + ", " +
      std::to_string(rc.steps) + " steps, stress " + demo::stress_name(rc.stress) +
      ", fault rate " + demo::num(rc.fault_rate, 3) + ", seed " + std::to_string(rc.seed);
  std::cout << "gnmr-demo: " << corpus.files << " file(s), " << corpus.bytes << " bytes, vocab "
            << corpus.vocab << " (train " << corpus.train.size() << " / val " << corpus.val.size()
            << " tokens); " << setup << "; device " << device << ", " << threads << " thread(s)\n";

  std::vector<demo::RunResult> runs;
  const auto t_all = std::chrono::steady_clock::now();
  auto run = [&](demo::RunConfig c) {
    const auto t0 = std::chrono::steady_clock::now();
    runs.push_back(demo::train_one(corpus, mc, c));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::cerr << "  " << runs.back().label << ": " << demo::num(s, 1) << " s, final val "
              << demo::num(runs.back().final_val) << "\n";
  };
  if (baseline) {
    demo::RunConfig c = rc;
    c.controller = "none";
    c.label = "unstressed-none";
    c.stress = demo::Stress::kNone;
    c.fault_rate = 0.0;
    run(c);
  }
  for (const auto& name : controllers) {
    demo::RunConfig c = rc;
    c.controller = name;
    c.keep_unit_trace = true;
    run(c);
  }
  const double total_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t_all).count();

  const double base_val = baseline ? runs.front().final_val : NAN;
  std::cout << "\n";
  demo::print_table(std::cout, runs, base_val);
  std::cout << "(val/unstr: final val loss / the unstressed fp32 run's; spikes: train loss > "
            << demo::num(100 * demo::kSpikeFrac, 0) << "% above the median of the previous "
            << demo::kSpikeWindow << " steps; recov%: unit-steps in recovery; share: controller "
               "time / step time)\n";

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
} catch (const std::exception& e) {
  std::cerr << "gnmr-demo: " << e.what() << "\n";
  return 2;
}
