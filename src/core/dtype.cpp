#include "core/dtype.h"

#include "ops/numerics.h"

namespace magi2 {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::BF16: return "BF16";
    case DType::F16: return "F16";
    case DType::F8E4M3: return "F8_E4M3";
    case DType::I32: return "I32";
    case DType::I64: return "I64";
    case DType::U8: return "U8";
    case DType::BOOL: return "BOOL";
  }
  return "?";
}

bool dtype_from_name(std::string_view s, DType* out) {
  struct { std::string_view n; DType t; } table[] = {
      {"F32", DType::F32}, {"BF16", DType::BF16}, {"F16", DType::F16},
      {"F8_E4M3", DType::F8E4M3}, {"I32", DType::I32}, {"I64", DType::I64},
      {"U8", DType::U8}, {"BOOL", DType::BOOL}};
  for (auto& e : table)
    if (e.n == s) { *out = e.t; return true; }
  return false;
}

float f16_bits_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  if (exp == 0) {
    // subnormal or zero: value = man * 2^-24, exact in fp32
    float v = std::ldexp(static_cast<float>(man), -24);
    return (h & 0x8000u) ? -v : v;
  }
  if (exp == 31) return bits_f32(sign | 0x7f800000u | (man << 13));
  return bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t f32_to_f16_bits(float f) {
  uint32_t u = f32_bits(f);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u;
  if (a >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520 -> inf
  if (a < 0x38800000u) {                          // below the smallest normal half
    float v = std::fabs(f) * 16777216.0f;         // scale by 2^24: exact, integer part = half subnormal units
    float r = std::nearbyint(v);                  // default rounding mode: nearest-even
    return sign | static_cast<uint16_t>(r);
  }
  uint32_t lsb = (a >> 13) & 1u;
  a += 0xfffu + lsb;
  return sign | static_cast<uint16_t>(((a >> 13) - (112u << 10)));
}

// The codec lives in ops/numerics.h so that host and device share it.
float f8e4m3_bits_to_f32(uint8_t b) { return e4m3_bits_to_f32(b); }

uint8_t f32_to_f8e4m3_bits(float f) { return f32_to_e4m3_bits(f); }

}  // namespace magi2
