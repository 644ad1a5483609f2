// float16 and bfloat16 <-> float32 conversions (round to nearest even, NaN and infinity kept),
// header-only so that the reduction loops inline them.
#pragma once

#include <cstdint>
#include <cstring>

namespace ddp::detail {

inline float bits_to_float(std::uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline std::uint32_t float_to_bits(float f) {
  std::uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return bits;
}

inline float bf16_to_float(std::uint16_t h) { return bits_to_float(std::uint32_t{h} << 16); }

inline std::uint16_t float_to_bf16(float f) {
  std::uint32_t bits = float_to_bits(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x40);  // quiet NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>(bits >> 16);
}

inline float fp16_to_float(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t{h & 0x8000u} << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu;
  const std::uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) return bits_to_float(sign | 0x7f800000u | (mantissa << 13));
  if (exponent != 0) return bits_to_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
  // Subnormal or zero: mantissa * 2^-24, exact in float.
  float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
  return sign ? -magnitude : magnitude;
}

inline std::uint16_t float_to_fp16(float f) {
  const std::uint32_t bits = float_to_bits(f);
  const std::uint16_t sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // overflows to infinity (>= 65520)
  if (abs < 0x38800000u) {                        // below the smallest normal: subnormal
    // Adding 0.5 moves the mantissa bits into place and the FPU rounds to nearest even.
    float shifted = bits_to_float(abs) + 0.5f;
    return sign | static_cast<std::uint16_t>(float_to_bits(shifted) - 0x3f000000u);
  }
  std::uint32_t rounded = abs + 0xc8000fffu + ((abs >> 13) & 1u);  // rebias by -112 << 23, round
  return sign | static_cast<std::uint16_t>(rounded >> 13);
}

}  // namespace ddp::detail
