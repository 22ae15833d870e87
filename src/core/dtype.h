// Element types and their exact conversions.
// bf16 rounding is round-to-nearest-even, the semantics of torch `.to(torch.bfloat16)`
// (spec magi2-dit.md §0.2); NaN stays NaN (quiet), infinities are kept.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace magi2 {

/// Storage dtypes that appear in checkpoints and activations.
enum class DType : uint8_t { F32, BF16, F16, F8E4M3, I32, I64, U8, BOOL };

/// Bytes per element.
constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::BF16: return 2;
    case DType::F16: return 2;
    case DType::F8E4M3: return 1;
    case DType::I32: return 4;
    case DType::I64: return 8;
    case DType::U8: return 1;
    case DType::BOOL: return 1;
  }
  return 0;
}

/// Safetensors spelling ("F32", "BF16", ...).
std::string_view dtype_name(DType t);
/// Parses a safetensors dtype string; returns false when unknown.
bool dtype_from_name(std::string_view s, DType* out);

inline uint32_t f32_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float bits_f32(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

/// fp32 -> bf16 bits, round-to-nearest-even; NaN -> quiet NaN with the sign kept.
inline uint16_t f32_to_bf16_bits(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  uint32_t lsb = (u >> 16) & 1u;
  u += 0x7fffu + lsb;
  return static_cast<uint16_t>(u >> 16);
}
/// bf16 bits -> fp32 (exact).
inline float bf16_bits_to_f32(uint16_t h) { return bits_f32(static_cast<uint32_t>(h) << 16); }
/// Rounds an fp32 value to the nearest bf16 value and widens it back (the "bf16(x)" of the spec).
inline float round_bf16(float f) { return bf16_bits_to_f32(f32_to_bf16_bits(f)); }

/// bfloat16 storage type: 16 bits, converted explicitly only.
struct bf16 {
  uint16_t bits = 0;
  bf16() = default;
  static bf16 from_f32(float f) { bf16 b; b.bits = f32_to_bf16_bits(f); return b; }
  float f32() const { return bf16_bits_to_f32(bits); }
};
static_assert(sizeof(bf16) == 2);

/// IEEE half bits -> fp32 (exact).
float f16_bits_to_f32(uint16_t h);
/// fp32 -> IEEE half bits, round-to-nearest-even.
uint16_t f32_to_f16_bits(float f);
/// OCP float8 e4m3fn bits -> fp32 (exact; 0x7f/0xff are NaN, no infinities).
/// = e4m3_bits_to_f32 of ops/numerics.h (the host/device codec).
float f8e4m3_bits_to_f32(uint8_t b);
/// fp32 -> float8 e4m3fn, round-to-nearest-even, saturating to +-448 (NaN stays
/// NaN, sign kept) = f32_to_e4m3_bits of ops/numerics.h (torch's rounding).
uint8_t f32_to_f8e4m3_bits(float f);

}  // namespace magi2
