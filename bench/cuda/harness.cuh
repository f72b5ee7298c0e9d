// bench/cuda/harness.cuh — what every part of gnmr_bench_cuda shares: the
// error check (BK), the run options (--reps, --quick, --only), the result
// rows printed as RESULT lines and the final table, and the event timer
// (median of --reps runs after warm-up).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace bench {

#define BK(call)                                                                                   \
  do {                                                                                             \
    const cudaError_t bk_e_ = (call);                                                              \
    if (bk_e_ != cudaSuccess) {                                                                    \
      std::fprintf(stderr, "%s:%d: %s -> %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(bk_e_)); \
      std::exit(1);                                                                                \
    }                                                                                              \
  } while (0)

inline int g_reps = 20;
inline bool g_quick = false;
inline std::string g_only;  // --only norms|controller|presets|telemetry|adamw|fused: one part (profilers, quick looks)

struct Row {
  std::string work, layout;
  double ms, gbps, roof_ms;
  std::string target;
};
inline std::vector<Row> g_rows;

inline void report(const std::string& work, const std::string& layout, double ms, double bytes, double roof_ms,
            const std::string& target) {
  const double gbps = bytes > 0 ? bytes / (ms * 1e-3) / 1e9 : 0.0;
  g_rows.push_back({work, layout, ms, gbps, roof_ms, target});
  std::printf("RESULT,%s,%s,%.4f ms,%.1f GB/s,roof %.4f ms,ratio %.3f\n", work.c_str(), layout.c_str(), ms, gbps,
              roof_ms, roof_ms > 0 ? ms / roof_ms : 0.0);
  std::fflush(stdout);
}

// Median time of launch() in ms, by events, after warm-up runs.
template <class F>
double median_ms(F&& launch, cudaStream_t s, int reps = -1, int warm = 3) {
  if (reps < 0) reps = g_reps;
  cudaEvent_t a, b;
  BK(cudaEventCreate(&a));
  BK(cudaEventCreate(&b));
  BK(cudaDeviceSynchronize());  // no setup work (any stream) may overlap the runs
  for (int i = 0; i < warm; ++i) launch();
  BK(cudaStreamSynchronize(s));
  std::vector<float> t;
  for (int i = 0; i < reps; ++i) {
    BK(cudaEventRecord(a, s));
    launch();
    BK(cudaEventRecord(b, s));
    BK(cudaEventSynchronize(b));
    float ms = 0;
    BK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  BK(cudaEventDestroy(a));
  BK(cudaEventDestroy(b));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace bench
