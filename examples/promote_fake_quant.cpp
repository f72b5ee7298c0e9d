// examples/promote_fake_quant.cpp — precision promotion in a training loop,
// on the host, with nothing but gnmr and the standard library: how a
// framework reads kPromote from the recommended controller
// (gnmr::make_default) and runs a promoted operator in high precision.
//
// A two-layer regression (8 -> 16 -> 4, ReLU) learns a fixed teacher network
// with hand-written gradients and SGD with momentum. Its GEMMs run
// fake-quantized (examples/fake_quant.hpp): layer 1 in FP8 E4M3, layer 2 in
// FP4 E2M1, per-tensor scales. Each linear layer is ONE gnmr unit made of two
// segments, its weight and its bias. From step 80 to 95 a few samples of
// every batch carry an outlier feature (x3 = +-40, the "massive activation"
// of LLMs): through layer 1 it becomes an outlier in layer 2's input, whose
// per-tensor FP4 scale then rounds every ordinary activation to zero.
//
// The same run is made three times, each under the same controller, the
// preset "default" (the stabilizer with GNMR's calibrated trigger inside
// it, which clips a granted unit to its mean and sets kPromote for the
// lock): everything in fp32 (the reference); low precision with kPromote
// ignored (what a framework that does not read the flag gets: the default's
// clipping alone); and low precision with kPromote read. In the last, a
// unit whose decision after step s carries kPromote runs step s+1's forward
// and backward in fp32 (docs/algorithm.md, Precision promotion), so a grant
// at step t promotes steps t+1 .. t+lock. The default grants at most one
// unit a step: the outliers trigger both layers at step 80, layer 1 gets
// the grant and layer 2 is denied (bounded by the stabilizer),
// then granted at step 81, when it triggers again.
// The program prints which steps ran which layer in high precision, then
// checks, and exits non-zero if any check fails:
//   - the promoted steps are exactly g+1 .. g+lock for every grant g;
//   - layer 2, the FP4 operator the outlier feeds, was promoted during the
//     outlier window;
//   - promotion kept the mean batch loss over the window lower than
//     clipping alone did.
//
// Expected output (x86-64, glibc; the figures are this program's own):
// see docs/record/examples.md, "promote_fake_quant".
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "fake_quant.hpp"
#include "gnmr/gnmr.hpp"

namespace {

constexpr std::uint32_t kIn = 8, kHidden = 16, kOut = 4, kBatch = 32, kVal = 256;
constexpr int kSteps = 140, kOutlierFrom = 80, kOutlierTo = 95;
constexpr float kLr = 0.02f, kMomentum = 0.9f;

// xorshift64* and Box-Muller: the same numbers with every standard library
// (std::normal_distribution is implementation-defined).
struct Rng {
  std::uint64_t s;
  double uniform() {
    s ^= s >> 12, s ^= s << 25, s ^= s >> 27;
    return static_cast<double>((s * 2685821657736338717ull) >> 11) * (1.0 / 9007199254740992.0);
  }
  float normal() {
    const double u = uniform() + 1e-300, v = uniform();
    return static_cast<float>(std::sqrt(-2.0 * std::log(u)) * std::cos(6.283185307179586 * v));
  }
};

struct Linear {
  std::uint32_t in, out;
  fq::Format fmt;
  std::vector<float> W, b, dW, db, vW, vb;  // weights, gradients, momenta
  // What the forward multiplied (quantized or not), kept for the backward:
  // the straight-through estimator differentiates the GEMM that ran.
  std::vector<float> Wq, xq;
  Linear(std::uint32_t i, std::uint32_t o, fq::Format f, Rng& rng)
      : in(i), out(o), fmt(f), W(i * o), b(o, 0.0f), dW(i * o), db(o), vW(i * o), vb(o), Wq(i * o) {
    for (float& w : W) w = rng.normal() / std::sqrt(static_cast<float>(i));
  }
  // y[n][o] for a batch; promoted = this step runs in high precision.
  std::vector<float> forward(const std::vector<float>& x, std::uint32_t n, bool promoted) {
    const float ws = fq::tensor_scale(fq::amax(W.data(), in * out), fmt);
    const float xs = fq::tensor_scale(fq::amax(x.data(), n * in), fmt);
    xq.resize(x.size());
    for (std::size_t k = 0; k < W.size(); ++k) Wq[k] = promoted ? W[k] : fq::fake_quant(W[k], ws, fmt);
    for (std::size_t k = 0; k < x.size(); ++k) xq[k] = promoted ? x[k] : fq::fake_quant(x[k], xs, fmt);
    std::vector<float> y(n * out);
    for (std::uint32_t r = 0; r < n; ++r)
      for (std::uint32_t o = 0; o < out; ++o)
        y[r * out + o] = fq::linear_out(&W[o * in], &x[r * in], in, b[o], promoted, fmt, ws, xs);
    return y;
  }
  // dy -> dx; accumulates dW, db (already zeroed).
  std::vector<float> backward(const std::vector<float>& dy, std::uint32_t n) {
    std::vector<float> dx(n * in, 0.0f);
    for (std::uint32_t r = 0; r < n; ++r)
      for (std::uint32_t o = 0; o < out; ++o) {
        const float g = dy[r * out + o];
        db[o] += g;
        for (std::uint32_t i = 0; i < in; ++i) {
          dW[o * in + i] += g * xq[r * in + i];
          dx[r * in + i] += g * Wq[o * in + i];
        }
      }
    return dx;
  }
  // SGD with momentum under the unit's decision: a skip is a select (the
  // gradient may be NaN), the clip is the decision's scale.
  void update(const gnmr::UnitDecision& d) {
    if (d.flags & gnmr::kSkip) return;
    for (std::size_t k = 0; k < W.size(); ++k) {
      vW[k] = kMomentum * vW[k] + d.scale * dW[k];
      W[k] -= kLr * vW[k];
    }
    for (std::size_t k = 0; k < b.size(); ++k) {
      vb[k] = kMomentum * vb[k] + d.scale * db[k];
      b[k] -= kLr * vb[k];
    }
  }
};

struct Net {
  Linear l1, l2;
  explicit Net(Rng& rng) : l1(kIn, kHidden, fq::e4m3(), rng), l2(kHidden, kOut, fq::e2m1(), rng) {}
  std::vector<float> h;  // ReLU output, for the backward
  std::vector<float> forward(const std::vector<float>& x, std::uint32_t n, bool hp1, bool hp2) {
    h = l1.forward(x, n, hp1);
    for (float& v : h) v = v > 0.0f ? v : 0.0f;
    return l2.forward(h, n, hp2);
  }
};

// Inputs ~ N(0, 1); in the outlier window, every 8th sample has x3 = +-40.
std::vector<float> inputs(Rng& rng, std::uint32_t n, bool outliers) {
  std::vector<float> x(n * kIn);
  for (float& v : x) v = rng.normal();
  if (outliers)
    for (std::uint32_t r = 0; r < n; r += 8) x[r * kIn + 3] = x[r * kIn + 3] < 0.0f ? -40.0f : 40.0f;
  return x;
}

float mse(const std::vector<float>& y, const std::vector<float>& t) {
  double s = 0.0;
  for (std::size_t k = 0; k < y.size(); ++k) s += 0.5 * (double(y[k]) - t[k]) * (double(y[k]) - t[k]);
  return static_cast<float>(s / (y.size() / kOut));
}

// kFp32: every forward in fp32. kClip: low precision, the decisions' scales
// and skips applied, kPromote ignored. kPromote: the same, kPromote read.
enum class Mode { kFp32, kClip, kPromote };
constexpr int kLock = 8;  // the default's lock (gnmr-calibrated's budget, MaxO{4, 8, 0})

struct Run {
  std::vector<float> loss;                      // per step: the batch loss of the forward that ran
  float val_loss = 0.0f;                        // at the end, fp32 evaluation on clean data
  std::vector<std::vector<bool>> high;          // [step][layer]: ran in high precision
  std::vector<std::vector<std::uint32_t>> flags;  // [step][unit]: the controller's decision flags
};

Run train(Mode mode) {
  Rng rng{0x5eed};
  Net teacher(rng), net(rng);
  Rng data{0xda7a};
  Rng val_rng{0x7a1};
  const std::vector<float> xv = inputs(val_rng, kVal, false);
  const std::vector<float> tv = teacher.forward(xv, kVal, true, true);

  // One unit per operator: a layer's weight and bias are two segments of
  // the same unit, so its norm is sqrt(|dW|^2 + |db|^2) and one decision
  // covers the whole GEMM.
  const std::vector<gnmr::Segment> segs = {
      {net.l1.dW.data(), net.l1.dW.size(), gnmr::DType::kF32, 0},
      {net.l1.db.data(), net.l1.db.size(), gnmr::DType::kF32, 0},
      {net.l2.dW.data(), net.l2.dW.size(), gnmr::DType::kF32, 1},
      {net.l2.db.data(), net.l2.db.size(), gnmr::DType::kF32, 1}};
  std::vector<float> partials(2);
  auto ctl = gnmr::make_default(2);  // the recommended controller, the same in every run

  Run run;
  for (int t = 1; t <= kSteps; ++t) {
    // The decisions of step t-1, read before this forward: the only
    // decisions that can still change how step t computes.
    // promoted_units(): the units whose decision carries kPromote, ascending,
    // no allocation (decisions()[u].flags & gnmr::kPromote reads one unit).
    bool hp[2] = {mode == Mode::kFp32, mode == Mode::kFp32};
    if (mode == Mode::kPromote && t > 1)
      for (std::uint32_t u : ctl->promoted_units()) hp[u] = true;
    run.high.push_back({hp[0], hp[1]});

    const std::vector<float> x = inputs(data, kBatch, t >= kOutlierFrom && t <= kOutlierTo);
    const std::vector<float> target = teacher.forward(x, kBatch, true, true);
    const std::vector<float> y = net.forward(x, kBatch, hp[0], hp[1]);
    run.loss.push_back(mse(y, target));
    std::vector<float> dy(y.size());
    for (std::size_t k = 0; k < y.size(); ++k) dy[k] = (y[k] - target[k]) / kBatch;
    for (Linear* l : {&net.l1, &net.l2}) {
      std::fill(l->dW.begin(), l->dW.end(), 0.0f);
      std::fill(l->db.begin(), l->db.end(), 0.0f);
    }
    std::vector<float> dh = net.l2.backward(dy, kBatch);
    for (std::size_t k = 0; k < dh.size(); ++k) dh[k] = net.h[k] > 0.0f ? dh[k] : 0.0f;
    net.l1.backward(dh, kBatch);

    gnmr::host_unit_partials(segs, partials);
    ctl->step(partials);
    net.l1.update(ctl->decisions()[0]);
    net.l2.update(ctl->decisions()[1]);
    run.flags.push_back({ctl->decisions()[0].flags, ctl->decisions()[1].flags});
  }
  run.val_loss = mse(net.forward(xv, kVal, true, true), tv);
  return run;
}

std::string hp_steps(const Run& r, std::uint32_t layer) {
  std::string s;
  int from = 0;
  for (int t = 1; t <= kSteps + 1; ++t) {
    const bool on = t <= kSteps && r.high[t - 1][layer];
    if (on && !from) from = t;
    if (!on && from) {
      s += (s.empty() ? "" : ", ") + std::to_string(from) + (t - 1 > from ? ".." + std::to_string(t - 1) : "");
      from = 0;
    }
  }
  return s.empty() ? "none" : s;
}

double window_mean(const std::vector<float>& v) {
  double s = 0.0;
  for (int t = kOutlierFrom; t <= kOutlierTo; ++t) s += v[t - 1];
  return s / (kOutlierTo - kOutlierFrom + 1);
}

}  // namespace

int main() {
  const Run hi = train(Mode::kFp32), clip = train(Mode::kClip), prom = train(Mode::kPromote);
  const int lock = kLock;

  std::printf("two-layer regression, layer 1 %s, layer 2 %s; outlier feature at steps %d..%d\n\n",
              fq::format_name(fq::e4m3()), fq::format_name(fq::e2m1()), kOutlierFrom, kOutlierTo);
  std::printf("step | batch loss: fp32  clip only  clip+promote | clip+promote: layer 1  layer 2 | granted\n");
  for (int t = kOutlierFrom - 2; t <= kOutlierTo + 3; ++t) {
    std::string g;
    for (std::uint32_t u = 0; u < 2; ++u)
      if (prom.flags[t - 1][u] & gnmr::kGranted) g += " layer " + std::to_string(u + 1);
    std::printf("%4d | %16.4f %10.4f %13.4f | %22s %8s |%s\n", t, hi.loss[t - 1], clip.loss[t - 1],
                prom.loss[t - 1], prom.high[t - 1][0] ? "fp32" : "low", prom.high[t - 1][1] ? "fp32" : "low",
                g.c_str());
  }
  std::printf("\nhigh-precision steps (clip+promote): layer 1: %s; layer 2: %s\n", hp_steps(prom, 0).c_str(),
              hp_steps(prom, 1).c_str());
  const double w_hi = window_mean(hi.loss), w_clip = window_mean(clip.loss), w_prom = window_mean(prom.loss);
  std::printf("mean batch loss over steps %d..%d: fp32 %.4f, clip only %.4f, clip+promote %.4f "
              "(%.0f%% of the gap closed)\n",
              kOutlierFrom, kOutlierTo, w_hi, w_clip, w_prom, 100.0 * (w_clip - w_prom) / (w_clip - w_hi));
  std::printf("validation loss at step %d (fp32 forward, clean data): fp32 %.4f, clip only %.4f, "
              "clip+promote %.4f\n\n",
              kSteps, hi.val_loss, clip.val_loss, prom.val_loss);

  // Checks. 1: the lifetime — step s ran unit u in high precision iff some
  // grant g of u has g < s <= g + lock.
  int bad = 0;
  for (std::uint32_t u = 0; u < 2; ++u)
    for (int s = 1; s <= kSteps; ++s) {
      bool want = false;
      for (int g = s - lock; g < s; ++g) want = want || (g >= 1 && (prom.flags[g - 1][u] & gnmr::kGranted));
      if (want != prom.high[s - 1][u]) {
        std::printf("CHECK FAILED: layer %u at step %d ran %s\n", u + 1, s, want ? "low" : "fp32");
        ++bad;
      }
    }
  // 2: layer 2 promoted inside the outlier window.
  bool l2_in_window = false;
  for (int s = kOutlierFrom; s <= kOutlierTo; ++s) l2_in_window = l2_in_window || prom.high[s - 1][1];
  if (!l2_in_window) {
    std::printf("CHECK FAILED: layer 2 was never promoted during the outlier window\n");
    ++bad;
  }
  // 3: the promoted forwards were closer to fp32 than clipping alone.
  if (!(w_prom < w_clip)) {
    std::printf("CHECK FAILED: promotion did not lower the batch loss over the window\n");
    ++bad;
  }
  std::printf(bad ? "promote_fake_quant: %d check(s) FAILED\n" : "promote_fake_quant: all checks passed\n", bad);
  return bad ? 1 : 0;
}
