// demo/data.hpp — the character-level corpus for gnmr-demo.
//
// Reads one text file, or every plain text file of a directory (the Debian
// fortunes collection by default), maps the bytes that occur to a dense
// vocabulary, and splits the text into a training and a held-out validation
// stream. The split is by 1 KiB chunks (every 10th chunk to validation) rather
// than "the last 10%", because the fortunes files are topical (law, kids,
// computers, ...): a tail split would measure topic shift, not overfitting.
//
// Batches come from a caller-owned std::mt19937_64, so every controller of a
// comparison sees exactly the same sequence of batches.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace demo {

struct Corpus {
  std::vector<std::int64_t> train, val;  // token ids
  int vocab = 0;
  std::size_t bytes = 0;
  std::size_t files = 0;
};

inline std::string read_file_bytes(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + p.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A directory contributes its regular files whose name has no extension:
// that skips fortune's binary index files (*.dat) and the *.u8 variants.
inline Corpus load_corpus(const std::string& path, std::size_t chunk = 1024) {
  namespace fs = std::filesystem;
  std::string text;
  Corpus c;
  const fs::path root(path);
  if (fs::is_directory(root)) {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(root))
      if (e.is_regular_file() && !e.path().has_extension()) files.push_back(e.path());
    std::sort(files.begin(), files.end());  // directory order is not stable
    for (const auto& f : files) text += read_file_bytes(f);
    c.files = files.size();
  } else if (fs::is_regular_file(root)) {
    text = read_file_bytes(root);
    c.files = 1;
  } else {
    throw std::runtime_error("--data: " + path + " is neither a file nor a directory");
  }
  c.bytes = text.size();
  if (text.size() < 20 * chunk)
    throw std::runtime_error("--data: " + path + " has " + std::to_string(text.size()) +
                             " bytes; need at least " + std::to_string(20 * chunk));
  std::array<int, 256> id{};
  id.fill(-1);
  for (unsigned char ch : text) id[ch] = 0;
  for (int b = 0; b < 256; ++b)
    if (id[b] == 0) id[b] = c.vocab++;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const std::int64_t t = id[static_cast<unsigned char>(text[i])];
    ((i / chunk) % 10 == 9 ? c.val : c.train).push_back(t);
  }
  return c;
}

// Random windows of ctx+1 tokens: inputs [B, ctx] and next-token targets.
inline std::pair<torch::Tensor, torch::Tensor> sample_batch(const std::vector<std::int64_t>& s,
                                                            int batch, int ctx,
                                                            std::mt19937_64& rng) {
  std::uniform_int_distribution<std::size_t> pick(0, s.size() - static_cast<std::size_t>(ctx) - 2);
  auto x = torch::empty({batch, ctx}, torch::kLong);
  auto y = torch::empty({batch, ctx}, torch::kLong);
  auto* xp = x.data_ptr<std::int64_t>();
  auto* yp = y.data_ptr<std::int64_t>();
  for (int b = 0; b < batch; ++b) {
    const std::size_t o = pick(rng);
    for (int t = 0; t < ctx; ++t) {
      xp[b * ctx + t] = s[o + t];
      yp[b * ctx + t] = s[o + t + 1];
    }
  }
  return {x, y};
}

// A fixed validation set: evenly spaced windows, identical for every run.
inline std::pair<torch::Tensor, torch::Tensor> val_set(const std::vector<std::int64_t>& s, int n,
                                                       int ctx) {
  auto x = torch::empty({n, ctx}, torch::kLong);
  auto y = torch::empty({n, ctx}, torch::kLong);
  const std::size_t stride = (s.size() - static_cast<std::size_t>(ctx) - 2) / static_cast<std::size_t>(n);
  for (int b = 0; b < n; ++b)
    for (int t = 0; t < ctx; ++t) {
      x.data_ptr<std::int64_t>()[b * ctx + t] = s[b * stride + t];
      y.data_ptr<std::int64_t>()[b * ctx + t] = s[b * stride + t + 1];
    }
  return {x, y};
}

}  // namespace demo
