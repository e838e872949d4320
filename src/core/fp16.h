// core/fp16.h — IEEE half (fp16) and bfloat16 <-> fp32 conversions on raw bit patterns.
//
// Owns the scalar, exact conversions every other module uses for 16-bit storage types:
//  - fp16 -> fp32 and bf16 -> fp32 are exact widenings (every 16-bit value is a float).
//    Subnormal halves are normalized; inf stays inf; NaN keeps its sign and payload
//    (a signaling NaN stays signaling, the same bits numpy produces).
//  - fp32 -> fp16 and fp32 -> bf16 round to nearest, ties to even. Overflow goes to inf,
//    underflow to (signed) zero or a subnormal half; NaN becomes a quiet NaN keeping the
//    top payload bits.
// Pure integer bit manipulation: no dependence on the FPU's rounding mode or on
// flush-to-zero / denormals-are-zero flags. Cost: a handful of integer ops and at most
// one branch per value; header-only so the compiler can inline it into hot loops.
#pragma once

#include <bit>
#include <cstdint>

namespace hs {

// Half bits -> float. Exact for all 65536 inputs.
inline float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;  // biased by 15
  uint32_t mant = h & 0x3ffu;        // 10 bits
  if (exp == 0x1fu) {                // inf or NaN: payload moves to the top of the float's
    return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  }
  if (exp == 0) {
    if (mant == 0) return std::bit_cast<float>(sign);  // +-0
    // Subnormal: value = mant * 2^-24. Shift the leading one up to bit 10 (the implicit
    // bit of a normal half) and lower the exponent by the same amount.
    const int shift = std::countl_zero(mant) - 21;  // mant in [1, 1023] -> shift in [1, 10]
    mant = (mant << shift) & 0x3ffu;
    exp = static_cast<uint32_t>(1 - shift + 112);  // as a float exponent (bias 127)
    return std::bit_cast<float>(sign | (exp << 23) | (mant << 13));
  }
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
}

// Float -> half bits, round to nearest even.
inline uint16_t fp32_to_fp16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) {  // inf or NaN
    if (ax == 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u);
    return static_cast<uint16_t>(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));  // quiet NaN
  }
  // 65520 is halfway between 65504 (max half, odd mantissa) and 65536: ties go to even,
  // which is the overflow to inf.
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (ax >= 0x38800000u) {  // >= 2^-14: a normal half
    // Rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits to nearest
    // even; a carry out of the mantissa correctly bumps the exponent.
    const uint32_t odd = (ax >> 13) & 1u;
    const uint32_t r = ax - (112u << 23) + 0xfffu + odd;
    return static_cast<uint16_t>(sign | (r >> 13));
  }
  // Below 2^-14: a subnormal half m * 2^-24, or zero. 2^-25 (exactly half of the smallest
  // subnormal) ties to even, i.e. to zero; float subnormals are far below it.
  if (ax <= 0x33000000u) return static_cast<uint16_t>(sign);
  const uint32_t e = ax >> 23;                         // in [102, 112]
  const uint32_t m = (ax & 0x7fffffu) | 0x800000u;     // 24-bit significand
  const uint32_t shift = 126u - e;                     // in [14, 24]
  uint32_t q = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (q & 1u))) ++q;  // may carry into the smallest normal
  return static_cast<uint16_t>(sign | q);
}

// bfloat16 bits -> float: the top half of a float. Exact; NaN payload kept.
inline float bf16_to_fp32(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

// Float -> bfloat16 bits, round to nearest even (overflow rounds to inf naturally).
inline uint16_t fp32_to_bf16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep sign and top payload, force quiet
    return static_cast<uint16_t>((x >> 16) | 0x40u);
  }
  const uint32_t odd = (x >> 16) & 1u;
  return static_cast<uint16_t>((x + 0x7fffu + odd) >> 16);
}

}  // namespace hs
