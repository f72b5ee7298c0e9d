// gnmr/core/half.hpp — bit-exact bf16 / fp16 <-> fp32 conversions.
//
// Gradients arrive as fp32, bf16 or fp16 bit patterns; the norm code needs
// their exact float values and the tests need the reverse direction. These
// are written with integer operations only, so they neither depend on a
// compiler's _Float16 / __bf16 support nor on the FPU's denormal modes: a
// process running with FTZ/DAZ (e.g. linked with -ffast-math) still decodes
// fp16 subnormals correctly, and the same functions compile for the device.
// float -> half rounds to nearest, ties to even (IEEE default); overflow
// gives +-Inf, NaN stays a quiet NaN of the same sign.
#pragma once

#include <cstdint>
#include <cstring>

#include "gnmr/core/math.hpp"

namespace gnmr {
namespace detail {

// fp16 magnitude bits (sign cleared) -> fp32 bits. Branch-free so a loop
// over a buffer vectorises: normals and Inf/NaN are a re-bias of the
// exponent field; subnormals are mantissa * 2^-24 computed from an exact
// integer-to-float conversion (never a subnormal float, so DAZ is harmless).
// Signed 32-bit arithmetic on purpose: SSE2 has signed compares and a
// signed int->float convert, not unsigned ones.
GNMR_HOST_DEVICE std::uint32_t fp16_mag_to_f32_bits(std::uint32_t mag) {
  const std::int32_t em = static_cast<std::int32_t>(mag & 0x7fffu);
  const std::int32_t is_sub = -static_cast<std::int32_t>(em < 0x0400);       // all ones / zero
  const std::int32_t is_special = -static_cast<std::int32_t>(em >= 0x7c00);  // Inf / NaN
  // bias 15 -> 127; Inf/NaN need the exponent field all ones (twice the shift).
  const std::int32_t normal = (em << 13) + (112 << 23) + (is_special & (112 << 23));
  const float subf = static_cast<float>(em) * 5.9604644775390625e-8f;  // em * 2^-24, exact
  std::int32_t sub;
  std::memcpy(&sub, &subf, sizeof sub);
  // Masks rather than ?: so the compiler if-converts and vectorises.
  return static_cast<std::uint32_t>((sub & is_sub) | (normal & ~is_sub));
}

}  // namespace detail

// bf16 is the upper half of an fp32: widening is exact.
GNMR_HOST_DEVICE float bf16_to_float(std::uint16_t h) {
  return detail::bits_to_float(static_cast<std::uint32_t>(h) << 16);
}

GNMR_HOST_DEVICE float fp16_to_float(std::uint16_t h) {
  const std::uint32_t sign = (static_cast<std::uint32_t>(h) & 0x8000u) << 16;
  return detail::bits_to_float(sign | detail::fp16_mag_to_f32_bits(h & 0x7fffu));
}

GNMR_HOST_DEVICE std::uint16_t float_to_bf16(float f) {
  const std::uint32_t u = detail::float_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u)  // NaN: keep sign and top payload, force quiet
    return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
  // Round to nearest even on bit 16; a carry into the exponent is the right
  // answer, including the overflow of values >= bf16 max + half ulp to Inf.
  const std::uint32_t rounded = u + 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(rounded >> 16);
}

GNMR_HOST_DEVICE std::uint16_t float_to_fp16(float f) {
  const std::uint32_t u = detail::float_to_bits(f);
  const std::uint16_t sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u)  // NaN: quiet, keep the top payload bits
    return static_cast<std::uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x03ffu));
  // >= 65520 (halfway between 65504 and 2^16, odd mantissa below) -> Inf.
  if (a >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);
  if (a >= 0x38800000u) {  // fp16 normal range, |f| >= 2^-14
    const std::uint32_t rounded = a + 0x0fffu + ((a >> 13) & 1u);
    return static_cast<std::uint16_t>(sign | ((rounded - (112u << 23)) >> 13));
  }
  // fp16 subnormal (or zero): round(|f| * 2^24) to nearest even. Every float
  // below 2^-25 (float subnormals included) rounds to zero.
  const std::uint32_t e = a >> 23;
  if (e < 102u) return sign;
  const std::uint32_t m = (a & 0x007fffffu) | 0x00800000u;  // |f| = m * 2^(e-150)
  const std::uint32_t shift = 126u - e;                     // 14 .. 24
  std::uint32_t q = m >> shift;
  const std::uint32_t rem = m & ((1u << shift) - 1u);
  const std::uint32_t half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (q & 1u))) ++q;  // q = 0x400 is the smallest normal
  return static_cast<std::uint16_t>(sign | q);
}

}  // namespace gnmr
