// gnmr/state.hpp — save a controller's state to a versioned, checksummed
// binary blob and load it back (SPEC §5), so a resumed run keeps every
// unit's mean, trigger history and lock instead of starting unprotected.
//
//   std::vector<std::uint8_t> blob = gnmr::save_state(controller);  // with the checkpoint
//   gnmr::load_state(controller, blob.data(), blob.size());         // on resume
//
// Layout (all integers little-endian, fixed width):
//   offset  0  char[8]  magic "GNMRSTAT"
//           8  u32      format version (kStateFormatVersion)
//          12  u32      header size in bytes (56)
//          16  u64      number of units
//          24  u64      policy fingerprint (see below)
//          32  u64      sizeof(UnitState)
//          40  i64      steps done
//          48  u64      payload bytes (= units * sizeof(UnitState))
//          56  payload  the UnitState array, as in memory
//   56 + payload  u64   FNV-1a-64 checksum of everything before it
//
// The payload is the controllers' raw per-unit state (trivially copyable
// PODs of floats and integers): little-endian on every supported target
// (x86-64, arm64 and the GPU), so a blob saved by the host backend loads into
// the CUDA one. Padding bytes inside UnitState are copied as they are; two
// controllers with the same logical state may thus give blobs that differ in
// padding, never in meaning.
//
// The fingerprint hashes each policy's kName and the size of its per-unit
// State: it identifies the state *layout and meaning*, not the
// hyperparameters. Loading into a controller with another tau, maxO, lock or
// kappa is allowed on purpose — retuning on resume is a legitimate use, and
// the state (means, ratio history, grant steps) stays valid under it. A
// different mean tracker, trigger, recovery or norm is rejected.
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

#include "gnmr/detail/fnv.hpp"

namespace gnmr {

class StateError : public std::runtime_error {
 public:
  explicit StateError(const std::string& what) : std::runtime_error(what) {}
};

constexpr std::uint32_t kStateFormatVersion = 1;
constexpr std::size_t kStateHeaderBytes = 56;
constexpr std::size_t kStateChecksumBytes = 8;

// What a structurally valid blob declares (read_state_info checks magic,
// version, sizes and checksum; it does not compare with any controller).
struct StateInfo {
  std::uint32_t version;
  std::uint64_t num_units;
  std::uint64_t fingerprint;
  std::uint64_t state_size;  // sizeof(UnitState) of the saving controller
  std::int64_t steps_done;
  std::uint64_t payload_bytes;
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

template <class P, class = void>
struct state_size_of : std::integral_constant<std::uint64_t, 0> {};  // stateless (norms)
template <class P>
struct state_size_of<P, std::void_t<typename P::State>>
    : std::integral_constant<std::uint64_t, sizeof(typename P::State)> {};

template <class P>
std::uint64_t fingerprint_policy(std::uint64_t h) {
  return fnv1a64_u64(state_size_of<P>::value, fnv1a64_str(P::kName, h));
}

[[noreturn]] inline void state_fail(const std::string& msg) {
  throw StateError("gnmr: load_state: " + msg);
}

#if defined(__BYTE_ORDER__) && defined(__ORDER_LITTLE_ENDIAN__)
constexpr bool kLittleEndianHost = __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__;
#else
constexpr bool kLittleEndianHost = true;  // MSVC targets are all little-endian
#endif

}  // namespace detail

// Fingerprint of a PolicySet (a controller's C::Policies): the five policy
// names and per-unit State sizes, in Norm, Mean, Trigger, Recovery, Budget order.
template <class PS>
std::uint64_t policy_fingerprint() {
  std::uint64_t h = detail::kFnvOffset;
  h = detail::fingerprint_policy<typename PS::NormT>(h);
  h = detail::fingerprint_policy<typename PS::MeanT>(h);
  h = detail::fingerprint_policy<typename PS::TriggerT>(h);
  h = detail::fingerprint_policy<typename PS::RecoveryT>(h);
  h = detail::fingerprint_policy<typename PS::BudgetT>(h);
  return h;
}

// "l2/ema/gnmr/clip_to_mean/maxo": for messages.
template <class PS>
std::string policy_names() {
  return std::string(PS::NormT::kName) + "/" + PS::MeanT::kName + "/" + PS::TriggerT::kName +
         "/" + PS::RecoveryT::kName + "/" + PS::BudgetT::kName;
}

// Checks a blob's structure and checksum; throws StateError.
inline StateInfo read_state_info(const void* data, std::size_t size) {
  using detail::get_le;
  using detail::state_fail;
  if (size < kStateHeaderBytes + kStateChecksumBytes)  // an empty vector's data() may be null
    state_fail("blob too small (" + std::to_string(size) + " bytes; a state blob has at least " +
               std::to_string(kStateHeaderBytes + kStateChecksumBytes) + ")");
  if (data == nullptr) state_fail("null blob");
  const std::uint8_t* p = static_cast<const std::uint8_t*>(data);
  if (std::memcmp(p, detail::kStateMagic, 8) != 0)
    state_fail("not a gnmr state blob (bad magic; expected \"GNMRSTAT\")");
  StateInfo s;
  s.version = static_cast<std::uint32_t>(get_le(p + 8, 4));
  if (s.version != kStateFormatVersion)
    state_fail("unsupported format version " + std::to_string(s.version) + " (this build reads " +
               std::to_string(kStateFormatVersion) + ")");
  const std::uint64_t header = get_le(p + 12, 4);
  if (header != kStateHeaderBytes)
    state_fail("header size mismatch (" + std::to_string(header) + " bytes, version " +
               std::to_string(s.version) + " has " + std::to_string(kStateHeaderBytes) + ")");
  s.num_units = get_le(p + 16, 8);
  s.fingerprint = get_le(p + 24, 8);
  s.state_size = get_le(p + 32, 8);
  s.steps_done = static_cast<std::int64_t>(get_le(p + 40, 8));
  s.payload_bytes = get_le(p + 48, 8);
  const std::uint64_t room = size - kStateHeaderBytes - kStateChecksumBytes;
  if (s.payload_bytes > room)
    state_fail("truncated blob (" + std::to_string(size) + " bytes; the header declares a " +
               std::to_string(s.payload_bytes) + "-byte payload, so " +
               std::to_string(s.payload_bytes + kStateHeaderBytes + kStateChecksumBytes) +
               " expected)");
  if (s.payload_bytes < room)
    state_fail(std::to_string(room - s.payload_bytes) + " trailing bytes after the checksum (" +
               std::to_string(size) + " bytes, " +
               std::to_string(s.payload_bytes + kStateHeaderBytes + kStateChecksumBytes) +
               " expected)");
  const std::size_t body = kStateHeaderBytes + static_cast<std::size_t>(s.payload_bytes);
  const std::uint64_t want = get_le(p + body, 8);
  if (detail::fnv1a64(p, body) != want) state_fail("checksum mismatch (the blob is corrupted)");
  if (s.state_size != 0 && s.num_units > ~std::uint64_t{0} / s.state_size)
    state_fail("payload size mismatch (unit count times state size overflows)");
  if (s.payload_bytes != s.num_units * s.state_size)
    state_fail("payload size mismatch (" + std::to_string(s.payload_bytes) + " bytes for " +
               std::to_string(s.num_units) + " units of " + std::to_string(s.state_size) +
               " bytes)");
  // 2^62: far beyond any run, and step + lock arithmetic cannot overflow.
  if (s.steps_done < 0 || s.steps_done > (std::int64_t{1} << 62))
    state_fail("invalid step count " + std::to_string(s.steps_done));
  return s;
}

template <class C>
std::vector<std::uint8_t> save_state(const C& controller) {
  using UnitState = typename C::UnitState;
  static_assert(std::is_trivially_copyable<UnitState>::value,
                "gnmr: save_state needs a trivially copyable UnitState");
  static_assert(detail::kLittleEndianHost || sizeof(C) == 0,
                "gnmr: state blobs store the raw UnitState array: little-endian hosts only");
  const auto& st = controller.unit_states();
  const std::uint64_t n = st.size();
  const std::size_t payload = static_cast<std::size_t>(n) * sizeof(UnitState);
  std::vector<std::uint8_t> out(kStateHeaderBytes + payload + kStateChecksumBytes);
  std::uint8_t* p = out.data();
  std::memcpy(p, detail::kStateMagic, 8);
  detail::put_le(p + 8, kStateFormatVersion, 4);
  detail::put_le(p + 12, kStateHeaderBytes, 4);
  detail::put_le(p + 16, n, 8);
  detail::put_le(p + 24, policy_fingerprint<typename C::Policies>(), 8);
  detail::put_le(p + 32, sizeof(UnitState), 8);
  detail::put_le(p + 40, static_cast<std::uint64_t>(controller.steps_done()), 8);
  detail::put_le(p + 48, payload, 8);
  if (payload != 0) std::memcpy(p + kStateHeaderBytes, st.data(), payload);
  detail::put_le(p + kStateHeaderBytes + payload,
                 detail::fnv1a64(p, kStateHeaderBytes + payload), 8);
  return out;
}

template <class C>
void load_state(C& controller, const void* data, std::size_t size) {
  using UnitState = typename C::UnitState;
  using PS = typename C::Policies;
  static_assert(std::is_trivially_copyable<UnitState>::value,
                "gnmr: load_state needs a trivially copyable UnitState");
  static_assert(detail::kLittleEndianHost || sizeof(C) == 0,
                "gnmr: state blobs store the raw UnitState array: little-endian hosts only");
  const StateInfo s = read_state_info(data, size);
  const std::uint64_t n = controller.num_units();
  if (s.num_units != n)
    detail::state_fail("unit count mismatch (the blob has " + std::to_string(s.num_units) +
                       " units, the controller " + std::to_string(n) + ")");
  const std::uint64_t fp = policy_fingerprint<PS>();
  if (s.fingerprint != fp) {
    char buf[2][19];
    std::snprintf(buf[0], sizeof buf[0], "0x%016llx", static_cast<unsigned long long>(s.fingerprint));
    std::snprintf(buf[1], sizeof buf[1], "0x%016llx", static_cast<unsigned long long>(fp));
    detail::state_fail("policy fingerprint mismatch: the blob (" + std::string(buf[0]) +
                       ") was saved by a controller with other policies than this one (" +
                       policy_names<PS>() + ", " + buf[1] + ")");
  }
  if (s.state_size != sizeof(UnitState))
    detail::state_fail("state size mismatch (the blob's UnitState has " +
                       std::to_string(s.state_size) + " bytes, this controller's " +
                       std::to_string(sizeof(UnitState)) + ")");
  // Parse into a temporary first: the controller changes only once all is valid.
  std::vector<UnitState> tmp(static_cast<std::size_t>(n));
  if (n != 0)
    std::memcpy(static_cast<void*>(tmp.data()),
                static_cast<const std::uint8_t*>(data) + kStateHeaderBytes,
                static_cast<std::size_t>(s.payload_bytes));
  controller.restore(std::move(tmp), s.steps_done);
}

template <class C>
void load_state(C& controller, const std::vector<std::uint8_t>& blob) {
  load_state(controller, blob.data(), blob.size());
}

}  // namespace gnmr
