// fuzz/standalone_main.cpp — runs a fuzz target over files, without libFuzzer.
//
// Lets the fuzz targets build with any compiler and run their seed corpus
// as an ordinary CTest (label fuzz), under ASan/UBSan when GNMR_SANITIZE is
// on: the targets are checked in every CI run, not only when clang fuzzes.
//   fuzz_X_replay FILE_OR_DIR...
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {
int run_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", p.string().c_str());
    return 1;
  }
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s FILE_OR_DIR...\n", argv[0]);
    return 2;
  }
  std::size_t files = 0;
  int bad = 0;
  const std::uint8_t none = 0;
  LLVMFuzzerTestOneInput(&none, 0);  // the empty input, always
  for (int i = 1; i < argc; ++i) {
    const fs::path p(argv[i]);
    if (fs::is_directory(p)) {
      std::vector<fs::path> all;
      for (const auto& e : fs::directory_iterator(p))
        if (e.is_regular_file()) all.push_back(e.path());
      std::sort(all.begin(), all.end());
      for (const auto& f : all) {
        bad |= run_file(f);
        ++files;
      }
    } else {
      bad |= run_file(p);
      ++files;
    }
  }
  std::printf("ran %zu inputs\n", files);
  return bad || files == 0 ? 1 : 0;
}
