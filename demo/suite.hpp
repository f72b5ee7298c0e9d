// demo/suite.hpp — the benchmark suite: runs (scenario, arm, seed,
// settings) as separate processes, in parallel, cached on disk.
//
// Each run is this same executable started with --run-one (main.cpp): it
// rebuilds the RunConfig from the scenario table, the arm table and the
// forwarded settings, checks that its key is the one the suite computed,
// trains with one torch thread (OPENBLAS/OMP threads 1 too) and writes its
// cache entry (runio.hpp). The suite starts at most --jobs runs at once, in
// plan order; an arm that depends on another arm's run of the same seed
// (random, fixed-list need gnmr-promote's) starts once that run is cached.
// Cached runs are not run again, so an interrupted suite resumes where it
// stopped. A failed run is reported (its run.log kept) and its dependents
// are not started; the suite then exits non-zero after reporting the rest.
#pragma once

#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "runio.hpp"
#include "scenarios.hpp"

extern char** environ;

namespace demo {

using Overrides = std::vector<std::pair<std::string, std::string>>;

// The config of one run: scenario preset, then the command line's settings,
// then the arm (its own overrides plus --max-o / --gnmr-set for gnmr arms).
inline RunConfig build_config(const std::string& scenario, const std::string& arm, std::uint64_t seed,
                              const Overrides& ov) {
  RunConfig c;
  find_scenario(scenario).apply(c);
  c.scenario = scenario;
  for (const auto& [flag, value] : ov) {
    const Setting* s = find_setting(flag);
    if (!s) throw std::invalid_argument("not a run setting: " + flag);
    s->set(c, value);
  }
  merge_arm(c, find_arm(arm));
  c.seed = seed;
  c.quant.check();
  if (!c.arm.depends_on.empty()) c.after_overrides = options_text(build_config(scenario, c.arm.depends_on, seed, ov).arm.overrides);
  return c;
}

struct Job {
  RunConfig cfg;
  std::string key, dir;
  int dep = -1;  // index of the job this one needs
  enum State { kTodo, kRunning, kDone, kFailed } state = kTodo;
  pid_t pid = -1;
};

struct Plan {
  std::vector<Job> jobs;
  std::string out;
};

inline std::string runs_dir(const std::string& out) { return out + "/runs"; }

// Jobs in scenario, seed, arm order; a missing dependency is added before
// its dependent (its row appears in the results too).
inline Plan make_plan(const std::vector<std::string>& scenarios, const std::vector<std::string>& arms,
                      const std::vector<std::uint64_t>& seeds, const Overrides& ov, const std::string& out) {
  Plan p;
  p.out = out;
  const auto find = [&p](const std::string& key) {
    for (std::size_t i = 0; i < p.jobs.size(); ++i)
      if (p.jobs[i].key == key) return static_cast<int>(i);
    return -1;
  };
  const auto add = [&](const std::string& s, const std::string& a, std::uint64_t seed, auto& self) -> int {
    Job j;
    j.cfg = build_config(s, a, seed, ov);
    j.key = run_key(j.cfg);
    const int have = find(j.key);
    if (have >= 0) return have;
    if (!j.cfg.arm.depends_on.empty()) j.dep = self(s, j.cfg.arm.depends_on, seed, self);
    j.dir = runs_dir(out) + "/" + j.key;
    if (std::filesystem::exists(j.dir + "/result.txt")) {
      read_result(j.dir, j.cfg);  // refuses a foreign entry
      j.state = Job::kDone;
    }
    p.jobs.push_back(std::move(j));
    return static_cast<int>(p.jobs.size()) - 1;
  };
  for (const auto& s : scenarios)
    for (auto seed : seeds)
      for (const auto& a : arms) add(s, a, seed, add);
  return p;
}

// argv of the child for job j; `forward` are the suite's setting flags.
inline std::vector<std::string> child_args(const std::string& self, const Plan& p, const Job& j,
                                           const Overrides& ov) {
  std::vector<std::string> a = {self, "--run-one", j.cfg.scenario, j.cfg.arm.name, std::to_string(j.cfg.seed),
                                "--run-dir", j.dir, "--run-key", j.key};
  if (j.dep >= 0) a.insert(a.end(), {"--dep-dir", p.jobs[static_cast<std::size_t>(j.dep)].dir});
  for (const auto& [f, v] : ov) a.insert(a.end(), {f, v});
  return a;
}

inline pid_t spawn(const std::vector<std::string>& args, const std::string& log) {
  std::vector<char*> argv;
  for (const auto& s : args) argv.push_back(const_cast<char*>(s.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, args[0].c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) throw std::runtime_error("cannot start " + args[0] + ": " + std::strerror(rc));
  return pid;
}

// Runs every job not yet cached, at most `jobs` at a time. Returns the
// number of failed runs.
inline int run_plan(Plan& p, int jobs, const Overrides& ov, const std::string& self) {
  // One thread per run: libtorch's intra-op pool and OpenBLAS's own.
  setenv("OPENBLAS_NUM_THREADS", "1", 1);
  setenv("OMP_NUM_THREADS", "1", 1);
  setenv("MKL_NUM_THREADS", "1", 1);
  std::filesystem::create_directories(runs_dir(p.out));
  std::size_t todo = 0, cached = 0;
  for (const auto& j : p.jobs) (j.state == Job::kDone ? cached : todo) += 1;
  std::cerr << "suite: " << p.jobs.size() << " runs, " << cached << " cached, " << todo << " to run, "
            << jobs << " at a time\n";
  const auto t0 = std::chrono::steady_clock::now();
  int running = 0, failed = 0;
  std::size_t done = 0;
  std::map<pid_t, std::size_t> by_pid;
  for (;;) {
    for (std::size_t i = 0; i < p.jobs.size() && running < jobs; ++i) {
      Job& j = p.jobs[i];
      if (j.state != Job::kTodo) continue;
      if (j.dep >= 0) {
        const auto ds = p.jobs[static_cast<std::size_t>(j.dep)].state;
        if (ds == Job::kFailed) j.state = Job::kFailed, ++failed;
        if (ds != Job::kDone) continue;
      }
      std::filesystem::create_directories(runs_dir(p.out) + "/logs");
      j.pid = spawn(child_args(self, p, j, ov), runs_dir(p.out) + "/logs/" + j.key + ".log");
      j.state = Job::kRunning;
      by_pid[j.pid] = i;
      ++running;
    }
    if (running == 0) break;
    int status = 0;
    const pid_t pid = waitpid(-1, &status, 0);
    if (pid < 0) throw std::runtime_error("waitpid failed");
    const auto it = by_pid.find(pid);
    if (it == by_pid.end()) continue;
    Job& j = p.jobs[it->second];
    by_pid.erase(it);
    --running;
    ++done;
    const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0 && std::filesystem::exists(j.dir + "/result.txt");
    j.state = ok ? Job::kDone : Job::kFailed;
    const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::cerr << "  [" << done << "/" << todo << ", " << static_cast<int>(el) << " s] " << j.cfg.scenario << " "
              << j.cfg.arm.name << " seed " << j.cfg.seed;
    if (ok) {
      const Result r = read_result(j.dir, j.cfg);
      std::cerr << ": val " << r.at("final_val_loss") << ", " << num17(field(r, "cpu_s")).substr(0, 5) << " cpu-s\n";
    } else {
      ++failed;
      std::cerr << ": FAILED, see " << runs_dir(p.out) << "/logs/" << j.key << ".log\n";
    }
  }
  return failed;
}

}  // namespace demo
