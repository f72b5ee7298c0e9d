// gnmr/cuda/controller_kernels.cuh — the two kernels of one device
// controller step (launched by gnmr/cuda/controller.cuh), covering the four
// phases of gnmr/step/step.hpp:
//
//   ctrl_evaluate_select (phase 1, then phase 2 in its last block): one
//           thread per unit runs detail::evaluate_unit, stores the norm, its
//           verdict (detail::UnitVerdict, what the commit needs of the
//           evaluation) and the unit's rank key (0 unless it is a
//           candidate), and counts held
//           slots and candidates per block (__syncthreads_count); with few
//           slots each block also keeps its top-`slots` keys. With the
//           systemic rule on it also counts triggered units, and under
//           global-clip sums its 256 squared norms by the halving tree of
//           detail::total_sq_tree (double, in dynamic shared memory that is
//           only requested then). The last block to finish (integer counter)
//           is where phase 2, the selection, happens: it turns the counts
//           into a SelectRule by the radix select of gnmr/step/select.hpp
//           (block_radix_select below), sums the block sums by the same
//           tree, and runs decide_systemic (the tracker of the total lives in
//           device memory): a SystemicStep next to the rule.
//   ctrl_commit_summarize (phases 3 and 4): one thread per unit
//           rebuilds its view from the stored verdict (detail::view_of: the
//           trigger's arithmetic is not repeated), applies the rule and the
//           SystemicStep, runs
//           detail::commit_unit, writes state/decision/report and folds a
//           SummaryAcc per block; the last block merges the block
//           accumulators, writes the StepSummary and advances the device
//           step counter.
// Both kernels move a block's unit states (and the commit its reports and
// decisions) through shared memory in coalesced 16-byte words instead of
// per-thread struct accesses (stage_in/stage_out in block.cuh): at 1M units
// the commit was twice its byte count's time, at 10k units both were bound
// by per-field transactions on the few SMs a 40-block grid occupies.
// Everything that decides is integer or the shared per-unit functors, so the
// outcome is the host GnmrController's, bit for bit.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "gnmr/core/types.hpp"
#include "gnmr/cuda/block.cuh"
#include "gnmr/cuda/grid.cuh"
#include "gnmr/step/select.hpp"
#include "gnmr/step/step.hpp"

namespace gnmr {
namespace cuda {
namespace detail {

using gnmr::detail::kSelectThreads;
static_assert(kSelectThreads == kTreeThreads, "global-clip's tree of squares runs one 256-unit block per tree");

template <class PS>
struct CtrlArgs {
  PS p;
  typename PS::UnitState* state;
  UnitDecision* dec;
  UnitReport* rep;
  StepSummary* summary;
  std::int64_t* step;
  const double* numel;  // per unit, only for norms that need it
  const float* aux;     // per unit, the aux signal's partials (or norms); null: none (UnitView::aux)
  float* aux_norm;      // per unit, the finished aux the evaluation saw (a trigger that reads aux); or null
  float* norm;          // this step's norms
  gnmr::detail::UnitVerdict* verdict;  // phase 1's evaluation of each unit, for the commit
  std::uint64_t* key;   // rank keys, 0 = not a candidate
  std::uint32_t* block_counts;  // {held, candidates, triggered} per block
  std::uint64_t* block_top;     // topk keys per block (topk > 0)
  double* block_sq;             // global-clip: each block's sum of squared norms
  gnmr::detail::SelectRule* rule;
  SystemicStep* sys;            // the step's systemic outcome (evaluate -> commit)
  GlobalState* global;          // the tracker of the total norm
  gnmr::detail::SummaryAcc* block_acc;
  unsigned int* counters;  // last-block counters: [0] evaluate, [1] commit
  std::uint32_t n;
  std::uint32_t slots;
  std::uint32_t topk;
  std::uint32_t systemic_threshold;  // C: systemic iff more than C units trigger
};

// Unit state, reports and decisions move through shared memory (stage_in /
// stage_out) when a block's run fits in kStageBytes; larger states (a long
// WindowMean) are read and written per thread.
constexpr std::size_t kStageBytes = 32u * 1024u;
template <class State>
constexpr bool kStageState = sizeof(State) * kSelectThreads <= kStageBytes;
template <class State>  // uint4 words of the commit kernel's stage buffer
constexpr std::size_t kStageWords =
    ((kStageState<State> && sizeof(State) > sizeof(UnitReport) + sizeof(UnitDecision)
          ? sizeof(State)
          : sizeof(UnitReport) + sizeof(UnitDecision)) *
         kSelectThreads +
     15u) /
    16u;

// The radix select of gnmr/step/select.hpp over `m` keys, by one block of
// 256 threads: per pass a shared histogram (warp-aggregated integer atomics),
// a suffix count by scan, and the one digit that holds the need-th key.
__device__ __forceinline__ gnmr::detail::SelectRule block_radix_select(const std::uint64_t* keys,
                                                                       std::uint32_t m,
                                                                       std::uint32_t g,
                                                                       bool complete) {
  using gnmr::detail::RadixState;
  __shared__ std::uint32_t s_hist[256];
  __shared__ BlockScanStorage<kSelectThreads> s_scan;
  __shared__ RadixState s_state;
  __shared__ BlockReduceStorage<unsigned long long, kSelectThreads> s_min;
  __shared__ unsigned long long s_lo;
  const unsigned tid = threadIdx.x;
  const unsigned lane = tid & 31u;
  RadixState st{0u, 0u, g, 0u, 0u};
  int pass = 0;
  for (; pass < gnmr::detail::kRadixPasses && !st.done; ++pass) {
    const int sh = gnmr::detail::radix_shift(pass);
    s_hist[tid] = 0u;
    __syncthreads();
    for (std::uint32_t base = 0; base < m; base += blockDim.x) {  // warp-uniform trip count
      const std::uint32_t e = base + tid;
      const std::uint64_t k = e < m ? __ldcg(reinterpret_cast<const unsigned long long*>(keys) + e) : 0ull;
      const bool in = gnmr::detail::in_bucket(st, k);
      const unsigned d = in ? static_cast<unsigned>((k >> sh) & 0xffu) : 0x100u;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
      // Early passes put most keys in one digit: one atomic per digit per warp.
      const unsigned peers = __match_any_sync(0xffffffffu, d);
      if (in && lane == static_cast<unsigned>(__ffs(peers) - 1)) atomicAdd(&s_hist[d], __popc(peers));
#else
      (void)lane;
      if (in) atomicAdd(&s_hist[d], 1u);
#endif
    }
    __syncthreads();
    // Thread t owns digit 255 - t, so the inclusive scan counts the keys of
    // the bucket whose digit is >= its own.
    const unsigned d = 255u - tid;
    const std::uint32_t cnt = s_hist[d];
    const std::uint32_t incl = block_inclusive_sum<kSelectThreads>(cnt, s_scan);
    const std::uint32_t above = incl - cnt;
    if (gnmr::detail::radix_digit_holds(above, cnt, st.need)) {
      RadixState nx = st;
      gnmr::detail::radix_advance(nx, pass, d, above, cnt, complete);
      s_state = nx;
    }
    __syncthreads();
    st = s_state;
    __syncthreads();
  }
  unsigned long long lo = ~0ull;
  if (st.take_min) {  // block-uniform
    for (std::uint32_t e = tid; e < m; e += blockDim.x) {
      const unsigned long long k = __ldcg(reinterpret_cast<const unsigned long long*>(keys) + e);
      if (gnmr::detail::in_bucket(st, k) && k < lo) lo = k;
    }
    lo = block_reduce_exact<kSelectThreads>(lo, MinU64{}, s_min);
    if (tid == 0) s_lo = lo;
    __syncthreads();
    lo = s_lo;
  }
  return gnmr::detail::radix_rule(st, lo, pass);
}

template <class PS, bool kFinish>
__global__ void __launch_bounds__(kSelectThreads) ctrl_evaluate_select(CtrlArgs<PS> a, const float* __restrict__ in) {
  __shared__ unsigned long long s_max[2][32];
  __shared__ BlockReduceStorage<Counts3, kSelectThreads> s_red;
  __shared__ Counts3 s_tot;
  __shared__ int s_last;
  extern __shared__ double s_sq[];  // kSelectThreads doubles, global-clip only
  using State = typename PS::UnitState;
  constexpr bool kStage = kStageState<State>;
  __shared__ uint4 s_stage[kStage ? (sizeof(State) * kSelectThreads + 15u) / 16u : 1u];
  const std::uint32_t base = blockIdx.x * kSelectThreads;
  const std::uint32_t i = base + threadIdx.x;
  const std::int64_t t = *a.step + 1;
  allow_dependents();  // the commit's blocks may stage their state meanwhile
  if constexpr (kStage) {
    stage_in(s_stage, a.state + base, a.n - base < kSelectThreads ? a.n - base : kSelectThreads);
    __syncthreads();
  }
  // The systemic rule's share of the work below is behind branches on this
  // kernel parameter: uniform, and nothing at all when the rule is off.
  const SystemicAction action = a.p.opt.systemic.action;
  const bool need_total = gnmr::detail::needs_total(a.p.opt.systemic, a.p.opt.warmup_clip);
  std::uint64_t key = 0u;
  int held = 0, cand = 0, trig = 0;
  double sq = 0.0;
  if (i < a.n) {
    const float x = in[i];
    const float norm = kFinish ? a.p.norm.finish(x, a.numel ? a.numel[i] : 1.0) : x;
    const State& st = kStage ? reinterpret_cast<const State*>(s_stage)[threadIdx.x] : a.state[i];
    const float ax = a.aux == nullptr ? 0.0f
                     : kFinish        ? a.p.norm.finish(a.aux[i], a.numel ? a.numel[i] : 1.0)
                                      : a.aux[i];
    if (a.aux_norm != nullptr) a.aux_norm[i] = ax;  // what an aux trace records (host: aux_norms())
    const UnitView v = gnmr::detail::evaluate_unit(a.p, st, norm, t, i, ax);
    held = (v.flags & kInRecovery) ? 1 : 0;
    cand = gnmr::detail::is_candidate(v.flags) ? 1 : 0;
    trig = (v.flags & kTriggered) ? 1 : 0;
    if (need_total) sq = gnmr::detail::total_square(norm);
    key = cand ? gnmr::detail::rank_key(v.risk, i) : 0u;
    a.norm[i] = norm;
    a.verdict[i] = gnmr::detail::verdict_of(v);
    a.key[i] = key;
  }
  const std::uint32_t nheld = static_cast<std::uint32_t>(__syncthreads_count(held));
  const std::uint32_t ncand = static_cast<std::uint32_t>(__syncthreads_count(cand));
  const std::uint32_t ntrig =
      action != SystemicAction::kOff ? static_cast<std::uint32_t>(__syncthreads_count(trig)) : 0u;
  if (need_total) {
    s_sq[threadIdx.x] = sq;
    __syncthreads();
    block_tree_256(s_sq);
    if (threadIdx.x == 0) a.block_sq[blockIdx.x] = s_sq[0];
  }
  if (a.topk) {
    block_topk(key, a.topk, ncand < a.topk ? ncand : a.topk, a.block_top + static_cast<std::size_t>(blockIdx.x) * a.topk,
               s_max);
  }
  if (threadIdx.x == 0) {
    a.block_counts[3 * blockIdx.x] = nheld;
    a.block_counts[3 * blockIdx.x + 1] = ncand;
    a.block_counts[3 * blockIdx.x + 2] = ntrig;
  }
  if (!last_block_done(a.counters + 0, gridDim.x, &s_last)) return;

  // The last block: totals, the systemic outcome, then the rule.
  // The three counts (held, candidates, triggered) in one reduction.
  Counts3 tot{{0u, 0u, 0u}};
  for (std::uint32_t b = threadIdx.x; b < gridDim.x; b += blockDim.x) {
    tot.v[0] += __ldcg(a.block_counts + 3 * b);
    tot.v[1] += __ldcg(a.block_counts + 3 * b + 1);
    tot.v[2] += __ldcg(a.block_counts + 3 * b + 2);
  }
  tot = block_reduce_exact<kSelectThreads>(tot, AddCounts3{}, s_red);
  if (threadIdx.x == 0) s_tot = tot;
  __syncthreads();
  const std::uint32_t h = s_tot.v[0];
  const std::uint32_t c = s_tot.v[1];
  double total_sq = 0.0;
  if (need_total) total_sq = block_sums_tree(a.block_sq, gridDim.x, s_sq);
  if (threadIdx.x == 0) {
    SystemicStep sy = gnmr::detail::decide_systemic(a.p.opt.systemic, a.systemic_threshold, s_tot.v[2],
                                                    static_cast<float>(total_sq), *a.global);
    sy.warm_scale = gnmr::detail::warmup_clip_scale(a.p.opt.warmup_clip, t, static_cast<float>(total_sq));
    *a.sys = sy;
  }
  // kHold on a systemic step: no grant; else at most max_grants (every
  // thread reads the same counts, so every thread computes the same g).
  const std::uint32_t g = gnmr::detail::step_grants(a.p.opt.systemic, a.systemic_threshold, s_tot.v[2],
                                                    gnmr::detail::grants_wanted(a.slots, h, c));
  gnmr::detail::SelectRule rule;
  if (g == 0u) {
    rule = gnmr::detail::rule_none();
  } else if (c <= g) {
    rule = gnmr::detail::rule_all();
  } else if (a.topk) {
    rule = block_radix_select(a.block_top, gridDim.x * a.topk, g, false);
  } else {
    rule = block_radix_select(a.key, a.n, g, true);
  }
  if (threadIdx.x == 0) *a.rule = rule;
}

// Phase 3 for one block's units, the one commit body of the controller's
// kernel below and of the fused layered commit (layered_fused.cuh): stage
// the states in (overlapping the evaluation, this grid's programmatic
// predecessor), wait for its norms, keys, rule and systemic step, evaluate
// and commit each unit, write the states back, the decisions and reports to
// dec_out / rep_out, and this block's SummaryAcc to a.block_acc. `post(d, r)`
// may rewrite a unit's decision and report after its commit (the layered
// combine; the plain commit passes them through). Returns whether this block
// is the last to finish (then the caller merges the block accumulators);
// `sys` receives the step's SystemicStep.
template <class PS, class Post>
__device__ __forceinline__ bool commit_block(const CtrlArgs<PS>& a, std::int64_t t, UnitDecision* dec_out,
                                             UnitReport* rep_out, uint4* s_stage, gnmr::detail::SummaryAcc* s_acc,
                                             int* s_last, SystemicStep& sys, Post post) {
  using Acc = gnmr::detail::SummaryAcc;
  using State = typename PS::UnitState;
  constexpr bool kStage = kStageState<State>;
  const std::uint32_t base = blockIdx.x * kSelectThreads;
  const std::uint32_t count = a.n - base < kSelectThreads ? a.n - base : kSelectThreads;
  const std::uint32_t i = base + threadIdx.x;
  const bool active = i < a.n;
  State* s_state = reinterpret_cast<State*>(s_stage);
  UnitReport* s_rep = reinterpret_cast<UnitReport*>(s_stage);
  UnitDecision* s_dec = reinterpret_cast<UnitDecision*>(s_rep + kSelectThreads);
  // The evaluation only reads the state: staging it may overlap it (launched
  // as its programmatic dependent); its norms, keys and rule may not.
  if constexpr (kStage) stage_in(s_stage, a.state + base, count);
  wait_prior_grid();
  if constexpr (kStage) __syncthreads();
  Acc acc = Acc::zero();
  State s;
  UnitDecision d;
  UnitReport r;
  sys = *a.sys;
  if (active) {
    const gnmr::detail::SelectRule rule = *a.rule;
    s = kStage ? s_state[threadIdx.x] : a.state[i];
    const UnitView v0 = gnmr::detail::view_of(a.verdict[i], a.norm[i], t, i, s.budget.granted_at);
    const bool granted = gnmr::detail::rule_grants(rule, a.key[i]);
    std::uint32_t gskip = 0;
    const UnitView v = gnmr::detail::commit_unit(a.p, s, v0, granted, sys, d, &r, gskip);
    if constexpr (!kStage) a.state[i] = s;
    acc.add(v, i, gskip);
    post(d, r);
  }
  if constexpr (kStage) {
    __syncthreads();  // every thread has read its state from the stage
    if (active) s_state[threadIdx.x] = s;
    __syncthreads();
    stage_out(a.state + base, s_stage, count);
    __syncthreads();
  }
  if (active) {
    s_rep[threadIdx.x] = r;
    s_dec[threadIdx.x] = d;
  }
  __syncthreads();
  stage_out(rep_out + base, s_rep, count);
  stage_out(dec_out + base, s_dec, count);
  // A programmatic dependent (the telemetry drain, a user's kernel) may be
  // scheduled now; it waits for this grid's completion before reading.
  allow_dependents();
  const Acc& block_total = block_merge_tree<kSelectThreads>(acc, s_acc);
  if (threadIdx.x == 0) a.block_acc[blockIdx.x] = block_total;
  return last_block_done(a.counters + 1, gridDim.x, s_last);
}

struct PassThrough {
  __device__ void operator()(UnitDecision&, UnitReport&) const {}
};

template <class PS>
__global__ void __launch_bounds__(kSelectThreads) ctrl_commit_summarize(CtrlArgs<PS> a) {
  using Acc = gnmr::detail::SummaryAcc;
  __shared__ Acc s_acc[kSelectThreads];
  __shared__ uint4 s_stage[kStageWords<typename PS::UnitState>];
  __shared__ int s_last;
  const std::int64_t t = *a.step + 1;
  SystemicStep sys;
  if (!commit_block(a, t, a.dec, a.rep, s_stage, s_acc, &s_last, sys, PassThrough{})) return;
  Acc acc = Acc::zero();
  for (std::uint32_t b = threadIdx.x; b < gridDim.x; b += blockDim.x) acc.merge(load_cg(a.block_acc + b));
  __syncthreads();  // s_acc[0] was read above
  const Acc& total = block_merge_tree<kSelectThreads>(acc, s_acc);
  if (threadIdx.x == 0) {
    *a.summary = total.finish(t, sys);
    *a.step = t;
  }
}

}  // namespace detail
}  // namespace cuda
}  // namespace gnmr
