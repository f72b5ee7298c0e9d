// gnmr/io/state.hpp — save a controller's state to a versioned, checksummed
// binary blob and load it back (docs/algorithm.md), so a resumed run keeps every
// unit's mean, trigger history and lock, and the controller's global state
// (the systemic rule's tracker of the total norm), instead of starting
// unprotected.
//
//   std::vector<std::uint8_t> blob = gnmr::save_state(controller);  // with the checkpoint
//   gnmr::load_state(controller, blob.data(), blob.size());         // on resume
//
// Layout, version 2 (all integers little-endian, fixed width):
//   offset  0  char[8]  magic "GNMRSTAT"
//           8  u32      format version (kStateFormatVersion = 2)
//          12  u32      header size in bytes (64)
//          16  u64      number of units N
//          24  u64      policy fingerprint (gnmr/io/state_id.hpp)
//          32  u64      sizeof(UnitState)
//          40  i64      steps done
//          48  u64      unit payload bytes P (= N * sizeof(UnitState))
//          56  u32      identity bytes L
//          60  u32      global state bytes G (= sizeof(GlobalState))
//          64  char[L]  the policy identity, ASCII, no terminator
//                       ("l2/ema/gnmr<8>(window=4)/clip_to_mean/maxo")
//      64 + L  G bytes  the GlobalState, as in memory
//  64 + L + G  P bytes  the UnitState array, as in memory
//   ... + P    u64      FNV-1a-64 checksum of everything before it
//
// The states are the controllers' raw PODs of floats and integers:
// little-endian on every supported target (x86-64, arm64 and the GPU), so a
// blob saved by the host backend loads into the CUDA one and back (typed
// DeviceController overloads: gnmr/cuda/controller.cuh). The states are
// written canonically (gnmr/detail/canonical.hpp): padding and the byte of
// an empty policy state are zero, so the same state gives the same bytes on
// the host and the device, straight or resumed. (Blobs written before this
// rule may hold other bytes there; they load alike, meaning is unchanged.)
//
// The fingerprint hashes the identity (each policy's name, the template
// parameters and hyperparameters that shape its stored state, a Compose's
// parts), each policy's State size and the global state's layout. A blob
// loads only into a controller with the same fingerprint; the message names
// both sides. Every other hyperparameter (tau, maxO, lock, kappa, an EMA's
// beta, the systemic rule ...) may change on resume on purpose: the state
// stays valid under it.
//
// Version 1 (56-byte header, no identity, no global state, a fingerprint of
// kNames and State sizes only, in which every Compose was "compose" and no
// window or seed was recorded): load_state migrates it — same units, the
// systemic tracker fresh (no sample: what a version-1 controller had) — when
// its fingerprint matches and nothing in the controller is ambiguous under
// it; a Compose or a state-shaping hyperparameter (GNMR's Delta window,
// WindowMean's window, a seed) is, and such a blob is refused with a
// message that says so, unless StateLoadOptions::trust_v1 says the
// controller has the settings of the one that saved it.
//
// load_state validates everything before touching the controller: on any
// error it throws gnmr::StateError and the controller is unchanged.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "gnmr/detail/canonical.hpp"
#include "gnmr/detail/fnv.hpp"
#include "gnmr/io/state_id.hpp"
#include "gnmr/step/systemic.hpp"

namespace gnmr {

class StateError : public std::runtime_error {
 public:
  explicit StateError(const std::string& what) : std::runtime_error(what) {}
};

constexpr std::uint32_t kStateFormatVersion = 2;
constexpr std::size_t kStateHeaderBytes = 64;    // version 2
constexpr std::size_t kStateHeaderBytesV1 = 56;  // version 1
constexpr std::size_t kStateChecksumBytes = 8;
constexpr std::uint32_t kStateMaxSectionBytes = 1u << 16;  // identity, global state: sanity bound

// What a structurally valid blob declares (read_state_info checks magic,
// version, sizes and checksum; it does not compare with any controller).
struct StateInfo {
  std::uint32_t version;
  std::uint64_t num_units;
  std::uint64_t fingerprint;  // version 1: the version-1 fingerprint
  std::uint64_t state_size;   // sizeof(UnitState) of the saving controller
  std::int64_t steps_done;
  std::uint64_t payload_bytes;
  std::string identity;        // the saver's policy identity ("" in version 1)
  std::uint32_t global_bytes;  // 0 in version 1
  std::size_t global_offset;   // where the GlobalState starts (version 2)
  std::size_t payload_offset;  // where the UnitState array starts
};

// How load_state treats what it cannot check.
struct StateLoadOptions {
  // A version-1 blob whose fingerprint matches but does not record what this
  // controller's state depends on (a Compose's parts, GNMR's Delta window,
  // WindowMean's window, a seed): load it anyway, on the caller's word that
  // this controller has the settings of the one that saved it.
  bool trust_v1 = false;
};

namespace detail {

constexpr char kStateMagic[8] = {'G', 'N', 'M', 'R', 'S', 'T', 'A', 'T'};

inline void put_le(std::uint8_t* p, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = static_cast<std::uint8_t>(v >> (8 * i));
}
inline std::uint64_t get_le(const std::uint8_t* p, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<std::uint64_t>(p[i]) << (8 * i);
  return v;
}

[[noreturn]] inline void state_fail(const std::string& msg) {
  throw StateError("gnmr: load_state: " + msg);
}

inline std::string hex64(std::uint64_t v) {
  char buf[19];
  std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(v));
  return buf;
}

#if defined(__BYTE_ORDER__) && defined(__ORDER_LITTLE_ENDIAN__)
constexpr bool kLittleEndianHost = __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__;
#else
constexpr bool kLittleEndianHost = true;  // MSVC targets are all little-endian
#endif

// save_into's size check (DynController and the layered ones).
inline void check_save_size(std::size_t need, std::size_t size, const std::string& who) {
  if (size != need)
    throw std::invalid_argument("gnmr: " + who + ": save_into: the buffer has " + std::to_string(size) +
                                " bytes, the state blob " + std::to_string(need));
}

// One controller's blob writer: the fixed part of its blob (header and
// identity) is built once, at construction; write() then fills in the step
// count, the states and the checksum into a caller's buffer without
// allocating (DynController::save_into, the JAX handlers, the device's
// stream-ordered save).
template <class PS>
class StateBlobWriter {
 public:
  using UnitState = typename PS::UnitState;
  static_assert(std::is_trivially_copyable<UnitState>::value && std::is_trivially_copyable<GlobalState>::value,
                "gnmr: save_state needs trivially copyable states");
  static_assert(kLittleEndianHost || sizeof(PS) == 0,
                "gnmr: state blobs store the raw states: little-endian hosts only");

  StateBlobWriter(const PS& p, std::uint64_t n) : n_(n) {
    const std::string id = policy_identity(p);
    payload_ = static_cast<std::size_t>(n) * sizeof(UnitState);
    g_at_ = kStateHeaderBytes + id.size();
    u_at_ = g_at_ + sizeof(GlobalState);
    head_.assign(g_at_, 0);
    std::uint8_t* b = head_.data();
    std::memcpy(b, kStateMagic, 8);
    put_le(b + 8, kStateFormatVersion, 4);
    put_le(b + 12, kStateHeaderBytes, 4);
    put_le(b + 16, n, 8);
    put_le(b + 24, policy_fingerprint(p), 8);
    put_le(b + 32, sizeof(UnitState), 8);
    put_le(b + 48, payload_, 8);
    put_le(b + 56, id.size(), 4);
    put_le(b + 60, sizeof(GlobalState), 4);
    std::memcpy(b + kStateHeaderBytes, id.data(), id.size());
  }

  std::size_t bytes() const { return u_at_ + payload_ + kStateChecksumBytes; }
  std::uint64_t num_units() const { return n_; }

  // Writes the blob of these states to out[0, bytes()).
  void write(const UnitState* units, std::int64_t steps_done, const GlobalState& global, std::uint8_t* out) const {
    std::memcpy(out, head_.data(), head_.size());
    put_le(out + 40, static_cast<std::uint64_t>(steps_done), 8);
    // Canonical bytes (gnmr/detail/canonical.hpp): the same state gives the
    // same blob, whatever its padding held (the sections start zeroed).
    std::memset(out + g_at_, 0, sizeof(GlobalState) + payload_);
    canonical_copy(global, out + g_at_);
    for (std::uint64_t u = 0; u < n_; ++u) canonical_copy(units[u], out + u_at_ + u * sizeof(UnitState));
    put_le(out + u_at_ + payload_, fnv1a64(out, u_at_ + payload_), 8);
  }

 private:
  std::uint64_t n_;
  std::size_t payload_, g_at_, u_at_;
  std::vector<std::uint8_t> head_;  // header and identity; the step count is filled in by write()
};

// The blob of a state given as host arrays: what save_state writes for the
// host controller and, from a blocking copy, for the device one.
template <class PS>
std::vector<std::uint8_t> write_state_blob(const PS& p, const typename PS::UnitState* units, std::uint64_t n,
                                           std::int64_t steps_done, const GlobalState& global) {
  const StateBlobWriter<PS> w(p, n);
  std::vector<std::uint8_t> out(w.bytes());
  w.write(units, steps_done, global, out.data());
  return out;
}

}  // namespace detail

// Checks a blob's structure and checksum (versions 1 and 2); throws StateError.
inline StateInfo read_state_info(const void* data, std::size_t size) {
  using detail::get_le;
  using detail::state_fail;
  constexpr std::size_t kMin = kStateHeaderBytesV1 + kStateChecksumBytes;
  if (size < kMin)  // an empty vector's data() may be null
    state_fail("blob too small (" + std::to_string(size) + " bytes; a state blob has at least " +
               std::to_string(kMin) + ")");
  if (data == nullptr) state_fail("null blob");
  const std::uint8_t* p = static_cast<const std::uint8_t*>(data);
  if (std::memcmp(p, detail::kStateMagic, 8) != 0)
    state_fail("not a gnmr state blob (bad magic; expected \"GNMRSTAT\")");
  StateInfo s{};
  s.version = static_cast<std::uint32_t>(get_le(p + 8, 4));
  if (s.version != 1 && s.version != kStateFormatVersion)
    state_fail("unsupported format version " + std::to_string(s.version) + " (this build reads 1 and " +
               std::to_string(kStateFormatVersion) + ")");
  const std::size_t want_header = s.version == 1 ? kStateHeaderBytesV1 : kStateHeaderBytes;
  const std::uint64_t header = get_le(p + 12, 4);
  if (header != want_header)
    state_fail("header size mismatch (" + std::to_string(header) + " bytes, version " +
               std::to_string(s.version) + " has " + std::to_string(want_header) + ")");
  if (size < want_header + kStateChecksumBytes)
    state_fail("truncated blob (" + std::to_string(size) + " bytes, shorter than the header)");
  s.num_units = get_le(p + 16, 8);
  s.fingerprint = get_le(p + 24, 8);
  s.state_size = get_le(p + 32, 8);
  s.steps_done = static_cast<std::int64_t>(get_le(p + 40, 8));
  s.payload_bytes = get_le(p + 48, 8);
  std::uint64_t id_bytes = 0;
  if (s.version >= 2) {
    id_bytes = get_le(p + 56, 4);
    s.global_bytes = static_cast<std::uint32_t>(get_le(p + 60, 4));
    if (id_bytes > kStateMaxSectionBytes || s.global_bytes > kStateMaxSectionBytes)
      state_fail("section size mismatch (identity " + std::to_string(id_bytes) + " bytes, global state " +
                 std::to_string(s.global_bytes) + " bytes; at most " + std::to_string(kStateMaxSectionBytes) +
                 " each)");
  }
  const std::uint64_t fixed = want_header + id_bytes + s.global_bytes + kStateChecksumBytes;
  const std::uint64_t expect = fixed + s.payload_bytes;  // fixed is small: no overflow unless payload is huge
  if (s.payload_bytes > ~std::uint64_t{0} - fixed || expect > size)
    state_fail("truncated blob (" + std::to_string(size) + " bytes; the header declares a " +
               std::to_string(s.payload_bytes) + "-byte payload, so " +
               (s.payload_bytes > ~std::uint64_t{0} - fixed ? std::string("more than 2^64") : std::to_string(expect)) +
               " expected)");
  if (expect < size)
    state_fail(std::to_string(size - expect) + " trailing bytes after the checksum (" + std::to_string(size) +
               " bytes, " + std::to_string(expect) + " expected)");
  const std::size_t body = static_cast<std::size_t>(expect) - kStateChecksumBytes;
  if (detail::fnv1a64(p, body) != get_le(p + body, 8)) state_fail("checksum mismatch (the blob is corrupted)");
  if (s.state_size != 0 && s.num_units > ~std::uint64_t{0} / s.state_size)
    state_fail("payload size mismatch (unit count times state size overflows)");
  if (s.payload_bytes != s.num_units * s.state_size)
    state_fail("payload size mismatch (" + std::to_string(s.payload_bytes) + " bytes for " +
               std::to_string(s.num_units) + " units of " + std::to_string(s.state_size) + " bytes)");
  // 2^62: far beyond any run, and step + lock arithmetic cannot overflow.
  if (s.steps_done < 0 || s.steps_done > (std::int64_t{1} << 62))
    state_fail("invalid step count " + std::to_string(s.steps_done));
  s.identity.assign(reinterpret_cast<const char*>(p + want_header), static_cast<std::size_t>(id_bytes));
  s.global_offset = want_header + static_cast<std::size_t>(id_bytes);
  s.payload_offset = s.global_offset + s.global_bytes;
  return s;
}

namespace detail {

// Everything load_state checks against the controller's policies, on a
// parsed blob; the decoded global state (a fresh one for version 1).
template <class PS>
GlobalState check_state_for(const PS& p, std::uint64_t num_units, std::size_t unit_state_size,
                            const StateInfo& s, const std::uint8_t* blob, const StateLoadOptions& opt) {
  if (s.num_units != num_units)
    state_fail("unit count mismatch (the blob has " + std::to_string(s.num_units) + " units, the controller " +
               std::to_string(num_units) + ")");
  const std::string mine = policy_identity(p);
  if (s.version == 1) {
    if (s.fingerprint != policy_fingerprint_v1<PS>())
      state_fail("policy mismatch: this version-1 blob (fingerprint " + hex64(s.fingerprint) +
                 ") was saved by a controller with other policies than this one (" + mine +
                 "); version-1 blobs do not record the names");
    const bool ambiguous = v1_ambiguous(p.norm) || v1_ambiguous(p.mean) || v1_ambiguous(p.trigger) ||
                           v1_ambiguous(p.recovery) || v1_ambiguous(p.budget);
    if (ambiguous && !opt.trust_v1)
      state_fail("this version-1 blob matches the policy types of this controller (" + mine +
                 ") but does not record what that state depends on (a Compose's parts, GNMR's Delta "
                 "window, a WindowMean window, a seed), so it could be misread; if this controller has "
                 "the settings of the one that saved it, load with StateLoadOptions::trust_v1 = true "
                 "(save_state then writes version 2)");
  } else {
    // Both must match: the identity is what the message shows, the
    // fingerprint also covers the State sizes and the global layout.
    const std::uint64_t fp = policy_fingerprint(p);
    if (s.fingerprint != fp || s.identity != mine) {
      std::string msg = "policy mismatch: the blob was saved by " + s.identity + "; this controller is " + mine;
      if (s.identity == mine)
        msg += " (same identity, other state layout: fingerprint " + hex64(s.fingerprint) + " vs " + hex64(fp) +
               ")";
      state_fail(msg);
    }
    if (s.global_bytes != sizeof(GlobalState))
      state_fail("global state size mismatch (the blob's has " + std::to_string(s.global_bytes) +
                 " bytes, this controller's " + std::to_string(sizeof(GlobalState)) + ")");
  }
  if (s.state_size != unit_state_size)
    state_fail("state size mismatch (the blob's UnitState has " + std::to_string(s.state_size) +
               " bytes, this controller's " + std::to_string(unit_state_size) + ")");
  GlobalState g = init_global();
  if (s.version >= 2) std::memcpy(&g, blob + s.global_offset, sizeof(GlobalState));
  // The systemic tracker is fed only finite, non-negative totals with 0 < beta
  // < 1, so a mean that is negative or not finite, or a decay power outside
  // [0, 1], can only come from a corrupted blob: refused here, once, instead
  // of guarding every unit's scale on every step.
  const float tm = g.total.m, tp = g.total.beta_pow;
  if (!(tm >= 0.0f && tm <= 3.4028235e38f) || !(tp >= 0.0f && tp <= 1.0f))
    state_fail("invalid systemic tracker in the blob (mean " + std::to_string(tm) + ", decay power " +
               std::to_string(tp) + "): the blob is corrupted");
  return g;
}

}  // namespace detail

namespace detail {
// The typed controllers (a UnitState type and policies()): what the
// templates below read and write. A DynController (host/dyn_controller.hpp)
// and a DynDeviceController (cuda/dyn_controller.cuh) have overloads of
// their own, which these step aside for.
template <class C>
using host_states_t = decltype(std::declval<typename C::UnitState>(), std::declval<const C&>().policies());
}  // namespace detail

template <class C, class = detail::host_states_t<C>>
std::vector<std::uint8_t> save_state(const C& controller) {
  const auto& st = controller.unit_states();
  return detail::write_state_blob(controller.policies(), st.data(), st.size(), controller.steps_done(),
                                  controller.global_state());
}

template <class C, class = detail::host_states_t<C>>
void load_state(C& controller, const void* data, std::size_t size, const StateLoadOptions& opt = {}) {
  using UnitState = typename C::UnitState;
  static_assert(std::is_trivially_copyable<UnitState>::value,
                "gnmr: load_state needs a trivially copyable UnitState");
  static_assert(detail::kLittleEndianHost || sizeof(C) == 0,
                "gnmr: state blobs store the raw states: little-endian hosts only");
  const StateInfo s = read_state_info(data, size);
  const auto* blob = static_cast<const std::uint8_t*>(data);
  const GlobalState g =
      detail::check_state_for(controller.policies(), controller.num_units(), sizeof(UnitState), s, blob, opt);
  // Parse into a temporary first: the controller changes only once all is valid.
  std::vector<UnitState> tmp(static_cast<std::size_t>(s.num_units));
  if (!tmp.empty())
    std::memcpy(static_cast<void*>(tmp.data()), blob + s.payload_offset, static_cast<std::size_t>(s.payload_bytes));
  controller.restore(std::move(tmp), s.steps_done, g);
}

template <class C, class = detail::host_states_t<C>>
void load_state(C& controller, const std::vector<std::uint8_t>& blob, const StateLoadOptions& opt = {}) {
  load_state(controller, blob.data(), blob.size(), opt);
}

}  // namespace gnmr
