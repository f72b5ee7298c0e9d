// gnmr/host/state_image.hpp — a controller's state as an image (a host copy
// of the few memory regions that hold it) and the codec between that image
// and the state blob (gnmr/io/state.hpp); and the host half of a
// stream-ordered save and load (StageCore), which gnmr/cuda/state_stage.cuh
// runs inside a CUDA stream.
//
// Why: a framework that keeps gnmr's state in its own device array (JAX
// keeps it in a uint8 array: gnmr_jax) must load and save the blob every
// step. The device controllers' save()/load() copy through the host and
// synchronise the device; a training step must not. A typed controller's
// state is three regions (its unit states, its global state, its step
// counter), a layered controller's the outer's and the inner's: copied into
// pinned host memory on the stream, they are encoded into the blob by a host
// function the stream runs in order (cudaLaunchHostFunc), and a blob is
// decoded the same way. This header is that host logic, with no CUDA, so the
// CPU tests cover it against save_state/load_state
// (tests/unit/test_state_image.cpp).
//
// The image: the regions in order, each at a 16-byte aligned offset.
// encode() allocates nothing; check() is load_state's validation (it
// allocates, as load_state does: a restore, not a step); decode() writes the
// image of a blob check() accepted.
//
// Determinism: encode() writes save_state's bytes for the same state;
// decode() then encode() gives the blob back (canonical blobs).
#pragma once

#include <cstddef>
#include <cstdint>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>

#include "gnmr/host/layered.hpp"
#include "gnmr/io/state.hpp"

namespace gnmr {

// One region of an image: where it sits in the image, its size, and where
// it lives on the device (nullptr for an image built on the host).
struct ImageRegion {
  std::size_t offset;
  std::size_t bytes;
  void* device;
};

class StateImage {
 public:
  static constexpr std::size_t kMaxRegions = 8;
  virtual ~StateImage() = default;
  virtual std::size_t blob_bytes() const = 0;
  virtual std::size_t image_bytes() const = 0;
  virtual std::size_t regions() const = 0;
  virtual ImageRegion region(std::size_t i) const = 0;
  // The blob of the state in `image` (image_bytes()) into `blob` (blob_bytes()).
  virtual void encode(const std::uint8_t* image, std::uint8_t* blob) const = 0;
  // Throws gnmr::StateError where load_state would, with its message.
  virtual void check(const void* blob, std::size_t size, const StateLoadOptions& opt) const = 0;
  // The image of a blob check() accepted.
  virtual void decode(const void* blob, std::size_t size, std::uint8_t* image) const = 0;
};

namespace detail {
constexpr std::size_t align16(std::size_t x) { return (x + 15) & ~std::size_t{15}; }
}  // namespace detail

// A typed controller's image: UnitState[n], GlobalState, int64 step count.
template <class PS>
class TypedStateImage final : public StateImage {
 public:
  using UnitState = typename PS::UnitState;
  TypedStateImage(const PS& p, std::size_t n, UnitState* d_units = nullptr, GlobalState* d_global = nullptr,
                  std::int64_t* d_step = nullptr)
      : p_(p), n_(n), writer_(p, n), dev_{d_units, d_global, d_step} {
    g_at_ = detail::align16(n * sizeof(UnitState));
    s_at_ = detail::align16(g_at_ + sizeof(GlobalState));
  }
  std::size_t blob_bytes() const override { return writer_.bytes(); }
  std::size_t image_bytes() const override { return s_at_ + sizeof(std::int64_t); }
  std::size_t regions() const override { return 3; }
  ImageRegion region(std::size_t i) const override {
    if (i == 0) return {0, n_ * sizeof(UnitState), dev_[0]};
    if (i == 1) return {g_at_, sizeof(GlobalState), dev_[1]};
    return {s_at_, sizeof(std::int64_t), dev_[2]};
  }
  void encode(const std::uint8_t* image, std::uint8_t* blob) const override {
    GlobalState g;
    std::int64_t step;
    std::memcpy(&g, image + g_at_, sizeof g);
    std::memcpy(&step, image + s_at_, sizeof step);
    writer_.write(reinterpret_cast<const UnitState*>(image), step, g, blob);
  }
  void check(const void* blob, std::size_t size, const StateLoadOptions& opt) const override {
    const StateInfo s = read_state_info(blob, size);
    detail::check_state_for(p_, n_, sizeof(UnitState), s, static_cast<const std::uint8_t*>(blob), opt);
  }
  void decode(const void* blob, std::size_t size, std::uint8_t* image) const override {
    const auto* b = static_cast<const std::uint8_t*>(blob);
    const StateInfo s = read_state_info(blob, size);
    // trust_v1: check() has accepted this blob under the caller's options.
    StateLoadOptions trusted;
    trusted.trust_v1 = true;
    const GlobalState g = detail::check_state_for(p_, n_, sizeof(UnitState), s, b, trusted);
    std::memcpy(image, b + s.payload_offset, static_cast<std::size_t>(s.payload_bytes));
    std::memcpy(image + g_at_, &g, sizeof g);
    std::memcpy(image + s_at_, &s.steps_done, sizeof(std::int64_t));
  }

 private:
  PS p_;
  std::size_t n_, g_at_, s_at_;
  detail::StateBlobWriter<PS> writer_;
  void* dev_[3];
};

// A layered controller's image: the outer's, then the inner's; its blob the
// layered container (detail::nest_blobs) of theirs.
class NestedStateImage final : public StateImage {
 public:
  NestedStateImage(std::unique_ptr<StateImage> outer, std::unique_ptr<StateImage> inner)
      : o_(std::move(outer)), i_(std::move(inner)), i_at_(detail::align16(o_->image_bytes())) {
    if (o_->regions() + i_->regions() > kMaxRegions)
      throw std::invalid_argument("gnmr: NestedStateImage: more than " + std::to_string(kMaxRegions) + " regions");
  }
  std::size_t blob_bytes() const override { return detail::nested_bytes(o_->blob_bytes(), i_->blob_bytes()); }
  std::size_t image_bytes() const override { return i_at_ + i_->image_bytes(); }
  std::size_t regions() const override { return o_->regions() + i_->regions(); }
  ImageRegion region(std::size_t i) const override {
    if (i < o_->regions()) return o_->region(i);
    ImageRegion r = i_->region(i - o_->regions());
    r.offset += i_at_;
    return r;
  }
  void encode(const std::uint8_t* image, std::uint8_t* blob) const override {
    const std::size_t na = o_->blob_bytes(), nb = i_->blob_bytes();
    detail::nest_fields(blob, na, nb);
    o_->encode(image, blob + 16);
    i_->encode(image + i_at_, blob + 24 + na);
  }
  void check(const void* blob, std::size_t size, const StateLoadOptions& opt) const override {
    const detail::NestedBlobs b = detail::split_blobs(blob, size);
    o_->check(b.outer, b.outer_size, opt);
    i_->check(b.inner, b.inner_size, opt);
  }
  void decode(const void* blob, std::size_t size, std::uint8_t* image) const override {
    const detail::NestedBlobs b = detail::split_blobs(blob, size);
    o_->decode(b.outer, b.outer_size, image);
    i_->decode(b.inner, b.inner_size, image + i_at_);
  }

 private:
  std::unique_ptr<StateImage> o_, i_;
  std::size_t i_at_;
};

// The host half of a stream-ordered load and save, over caller-owned
// buffers (pinned and device-mapped on the CUDA path): `image`
// (image_bytes), `in` and `out` (blob_bytes each), `status` (one word the
// device reads too). The stream runs:
//   load:  blob -> in;  loaded();  if *status == kOk: image -> the regions
//   save:  if *status == kOk: the regions -> image;  saved();
//          if *status == kOk: out -> blob
// Invariant between calls: `image` holds the state of the blob in `out`.
// So loaded() skips the decode when `in` is byte for byte `out` (a training
// loop feeds each step's blob to the next), and decodes it in full
// otherwise; a blob that does not check leaves image and out as they were,
// sets *status to kFailed (so nothing is copied, the caller's blob keeps its
// bytes) and keeps the message for error(). A save after a failed load
// writes nothing.
class StageCore {
 public:
  static constexpr std::uint32_t kOk = 0, kFailed = 1;
  StageCore(const StateImage& image, std::uint8_t* image_buf, std::uint8_t* in, std::uint8_t* out,
            volatile std::uint32_t* status)
      : im_(image), image_(image_buf), in_(in), out_(out), status_(status) {
    *status_ = kOk;
  }
  // Call once `image` holds the controller's state (setup: a blocking copy).
  void start() { im_.encode(image_, out_); }

  void loaded(const StateLoadOptions& opt = {}) {
    const std::size_t n = im_.blob_bytes();
    if (std::memcmp(in_, out_, n) == 0) {
      *status_ = kOk;
      fast_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    try {
      im_.check(in_, n, opt);
      im_.decode(in_, n, image_);
      std::memcpy(out_, in_, n);
      *status_ = kOk;
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(mu_);
      if (err_.empty()) err_ = e.what();
      *status_ = kFailed;
    }
  }
  void saved() {
    if (*status_ == kOk) im_.encode(image_, out_);
  }

  // The first failure's message since the last take_error() ("" if none).
  std::string take_error() {
    std::lock_guard<std::mutex> lock(mu_);
    std::string e;
    e.swap(err_);
    return e;
  }
  std::uint64_t fast_loads() const { return fast_.load(std::memory_order_relaxed); }

 private:
  const StateImage& im_;
  std::uint8_t* image_;
  std::uint8_t* in_;
  std::uint8_t* out_;
  volatile std::uint32_t* status_;
  std::mutex mu_;
  std::string err_;
  std::atomic<std::uint64_t> fast_{0};  // written on the CUDA driver's thread
};

}  // namespace gnmr
