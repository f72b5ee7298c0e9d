// The state image codec and the host half of the stream-ordered save and
// load (gnmr/host/state_image.hpp), which gnmr::cuda::StateStage runs in a
// CUDA stream: checked here, on the CPU, against save_state/load_state for
// every typed preset and for the layered container, and the stage's protocol
// (fast path, full decode, a refused blob) with the device copies simulated.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "../support/dyn_runs.hpp"
#include "../support/make_once.hpp"
#include "gnmr/host/state_image.hpp"
#include "gnmr/presets/options.hpp"

namespace {

namespace presets = gnmr::presets;
using dyntest::rows;
using dyntest::units_for;

std::vector<std::vector<float>> first(const std::vector<std::vector<float>>& r, std::size_t k) {
  return {r.begin(), r.begin() + static_cast<std::ptrdiff_t>(k)};
}

// Images compare by their blobs: padding inside a state holds no value.
std::vector<std::uint8_t> enc(const gnmr::StateImage& im, const std::vector<std::uint8_t>& image) {
  std::vector<std::uint8_t> b(im.blob_bytes());
  im.encode(image.data(), b.data());
  return b;
}

std::string load_error(const std::string& name, std::size_t n, const std::vector<std::uint8_t>& blob) {
  auto c = gnmr_test::make(name, n);
  try {
    c->load(blob);
  } catch (const gnmr::StateError& e) {
    return e.what();
  }
  return "";
}
std::string check_error(const gnmr::StateImage& im, const std::vector<std::uint8_t>& blob) {
  try {
    im.check(blob.data(), blob.size(), {});
  } catch (const gnmr::StateError& e) {
    return e.what();
  }
  return "";
}

TEST_CASE("a typed image encodes save_state's blob and decodes it back, every preset", "[state][image]") {
  for (const auto& name : presets::names()) {
    if (presets::is_layered(name)) continue;
    INFO(name);
    const std::size_t n = units_for(name);
    const auto tr = rows(61, n, 150);
    for (std::size_t steps : {std::size_t{0}, std::size_t{37}, std::size_t{150}}) {
      INFO("steps " << steps);
      const gnmr_test::ImageOf a = gnmr_test::image_of(name, n, first(tr, steps));
      const gnmr::StateImage& im = *a.image;
      REQUIRE(im.blob_bytes() == a.blob.size());
      REQUIRE(im.regions() == 3);
      std::vector<std::uint8_t> blob(im.blob_bytes(), 0xEEu);  // poisoned
      im.encode(a.bytes.data(), blob.data());
      REQUIRE(blob == a.blob);
      // decode, then encode: the same blob; decode gives the image's values.
      REQUIRE_NOTHROW(im.check(a.blob.data(), a.blob.size(), {}));
      std::vector<std::uint8_t> back(im.image_bytes(), 0x5Au);
      im.decode(a.blob.data(), a.blob.size(), back.data());
      std::vector<std::uint8_t> again(im.blob_bytes());
      im.encode(back.data(), again.data());
      REQUIRE(again == a.blob);
      const gnmr::ImageRegion step = im.region(2);
      REQUIRE(std::memcmp(back.data() + step.offset, a.bytes.data() + step.offset, step.bytes) == 0);
    }
  }
}

TEST_CASE("an image's check refuses what load_state refuses, with its message", "[state][image]") {
  const std::size_t n = 5;
  const auto tr = rows(62, n, 40);
  const gnmr_test::ImageOf g = gnmr_test::image_of("gnmr", n, tr);
  const gnmr_test::ImageOf z = gnmr_test::image_of("zclip", n, tr);
  const gnmr_test::ImageOf g4 = gnmr_test::image_of("gnmr", 4, rows(62, 4, 40));
  std::vector<std::uint8_t> bad = g.blob;
  bad[bad.size() / 2] ^= 0x20u;
  const std::vector<std::uint8_t>& bad_c = bad;
  for (const std::vector<std::uint8_t>* b : {&z.blob, &g4.blob, &bad_c}) {
    const std::string want = load_error("gnmr", n, *b);
    REQUIRE(!want.empty());
    CHECK(check_error(*g.image, *b) == want);
  }
  std::vector<std::uint8_t> cut(g.blob.begin(), g.blob.end() - 1);
  CHECK(check_error(*g.image, cut) == load_error("gnmr", n, cut));
}

TEST_CASE("a nested image is the layered container of its two parts", "[state][image]") {
  const std::size_t n = 6;
  const auto tr = rows(63, n, 90);
  gnmr_test::ImageOf o = gnmr_test::image_of("stabilizer", n, tr);
  gnmr_test::ImageOf i = gnmr_test::image_of("gnmr-calibrated", n, tr);
  const std::vector<std::uint8_t> want = gnmr::detail::nest_blobs(o.blob, i.blob);
  const std::size_t o_image = o.image->image_bytes();
  gnmr::NestedStateImage im(std::move(o.image), std::move(i.image));
  REQUIRE(im.blob_bytes() == want.size());
  REQUIRE(im.regions() == 6);
  std::vector<std::uint8_t> image(im.image_bytes(), 0);
  const std::size_t i_at = im.region(3).offset;
  CHECK(i_at >= o_image);
  CHECK(i_at % 16 == 0);
  std::memcpy(image.data(), o.bytes.data(), o.bytes.size());
  std::memcpy(image.data() + i_at, i.bytes.data(), i.bytes.size());
  std::vector<std::uint8_t> blob(im.blob_bytes(), 0xEEu);
  im.encode(image.data(), blob.data());
  REQUIRE(blob == want);
  std::vector<std::uint8_t> back(im.image_bytes(), 0);
  REQUIRE_NOTHROW(im.check(want.data(), want.size(), {}));
  im.decode(want.data(), want.size(), back.data());
  std::vector<std::uint8_t> again(im.blob_bytes());
  im.encode(back.data(), again.data());
  CHECK(again == want);
  // A container whose inner part is another preset's: refused.
  const gnmr_test::ImageOf other = gnmr_test::image_of("gnmr", n, tr);
  const std::vector<std::uint8_t> mixed = gnmr::detail::nest_blobs(o.blob, other.blob);
  CHECK_THROWS_AS(im.check(mixed.data(), mixed.size(), {}), gnmr::StateError);
  // The same messages as the layered controller's load.
  auto layered = gnmr_test::make("stabilizer+gnmr-calibrated", n);
  REQUIRE_NOTHROW(layered->load(want));
  std::string want_msg, got_msg;
  try {
    layered->load(mixed);
  } catch (const gnmr::StateError& e) {
    want_msg = e.what();
  }
  try {
    im.check(mixed.data(), mixed.size(), {});
  } catch (const gnmr::StateError& e) {
    got_msg = e.what();
  }
  CHECK(!want_msg.empty());
  CHECK(got_msg == want_msg);
  std::vector<std::uint8_t> cut(want.begin(), want.begin() + 12);
  CHECK_THROWS_AS(im.check(cut.data(), cut.size(), {}), gnmr::StateError);
}

// The stream's order, run by hand: `regions` stands for the device memory
// (a copy of the image's layout); the step is simulated by writing the
// image of a reference controller one step further into it.
struct SimStage {
  explicit SimStage(const gnmr::StateImage& im, const std::vector<std::uint8_t>& start)
      : image(im.image_bytes()), in(im.blob_bytes()), out(im.blob_bytes()), regions(start),
        core(im, image.data(), in.data(), out.data(), &status) {
    image = regions;  // setup: a blocking copy of the device state
    core.start();
  }
  void load(const std::vector<std::uint8_t>& blob) {
    in = blob;
    core.loaded();
    if (status == gnmr::StageCore::kOk) regions = image;
  }
  bool save(std::vector<std::uint8_t>& blob) {
    if (status == gnmr::StageCore::kOk) image = regions;
    core.saved();
    if (status != gnmr::StageCore::kOk) return false;
    blob = out;
    return true;
  }
  std::vector<std::uint8_t> image, in, out, regions;
  volatile std::uint32_t status = 7;
  gnmr::StageCore core;
};

TEST_CASE("the stage's protocol: a loop takes the fast path, a restore decodes, a bad blob changes nothing",
          "[state][image]") {
  const std::size_t n = 5;
  const std::string name = "gnmr";
  const auto tr = rows(64, n, 40);
  const gnmr_test::ImageOf s0 = gnmr_test::image_of(name, n, {});
  SimStage st(*s0.image, s0.bytes);
  CHECK(st.status == gnmr::StageCore::kOk);
  std::vector<std::uint8_t> blob = s0.blob;
  for (std::size_t t = 1; t <= 20; ++t) {
    st.load(blob);
    REQUIRE(st.status == gnmr::StageCore::kOk);
    st.regions = gnmr_test::image_of(name, n, first(tr, t)).bytes;  // the step
    REQUIRE(st.save(blob));
    REQUIRE(blob == gnmr_test::image_of(name, n, first(tr, t)).blob);
  }
  CHECK(st.core.fast_loads() == 20);
  // Restore step 7's blob: decoded in full; the next save is step 8's.
  st.load(gnmr_test::image_of(name, n, first(tr, 7)).blob);
  CHECK(st.core.fast_loads() == 20);
  CHECK(enc(*s0.image, st.regions) == gnmr_test::image_of(name, n, first(tr, 7)).blob);
  st.regions = gnmr_test::image_of(name, n, first(tr, 8)).bytes;
  REQUIRE(st.save(blob));
  CHECK(blob == gnmr_test::image_of(name, n, first(tr, 8)).blob);
  // A corrupted blob: status failed, nothing copied either way, the message
  // kept once; then the good blob goes on as before.
  std::vector<std::uint8_t> bad = blob;
  bad[bad.size() - 3] ^= 0x01u;
  const std::vector<std::uint8_t> regions_before = st.regions, out_before = st.out;
  st.load(bad);
  CHECK(st.status == gnmr::StageCore::kFailed);
  CHECK(st.regions == regions_before);
  st.regions = gnmr_test::image_of(name, n, first(tr, 30)).bytes;  // a step ran anyway
  std::vector<std::uint8_t> kept = bad;
  CHECK_FALSE(st.save(kept));
  CHECK(kept == bad);
  CHECK(st.out == out_before);
  const std::string e = st.core.take_error();
  CHECK(e.find("checksum") != std::string::npos);
  CHECK(st.core.take_error().empty());
  st.load(blob);  // step 8's blob: the fast path puts its state back
  CHECK(st.status == gnmr::StageCore::kOk);
  CHECK(enc(*s0.image, st.regions) == gnmr_test::image_of(name, n, first(tr, 8)).blob);
}

}  // namespace
