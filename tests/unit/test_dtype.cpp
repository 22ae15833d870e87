// dtype conversions (bf16 / f16 / float8 e4m3fn) against an independent float64
// reference, plus the Tensor::to() path that uses them. The reference rounds with
// explicit floor/compare arithmetic (not the bit tricks under test), so a shared
// mistake between the two is unlikely.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"
#include "util/testing.h"

namespace magi2 {
namespace {

using test::throws_with;

// Nearest value of a binary format with `mant` fraction bits and smallest normal
// exponent `emin` (subnormals below it), ties to even, unbounded exponent range.
// Every step is exact in float64 for fp32 inputs.
double ref_round(double x, int mant, int emin) {
  if (x == 0) return x;
  const double a = std::fabs(x);
  int e;
  std::frexp(a, &e);
  e -= 1;  // a in [2^e, 2^(e+1))
  const int q = std::max(e, emin) - mant;  // exponent of one unit in the last place
  const double scaled = std::ldexp(a, -q);
  const double fl = std::floor(scaled);
  const double frac = scaled - fl;
  double r;
  if (frac > 0.5) r = fl + 1;
  else if (frac < 0.5) r = fl;
  else r = std::fmod(fl, 2.0) == 0.0 ? fl : fl + 1;  // tie: even significand
  return std::copysign(std::ldexp(r, q), x);
}

float ref_bf16(float x) {
  const double r = ref_round(x, 7, -126);
  // IEEE overflow: a result that needs exponent 128 becomes infinity.
  if (std::fabs(r) >= std::ldexp(1.0, 128)) return std::copysign(INFINITY, x);
  return static_cast<float>(r);
}

float ref_f16(float x) {
  const double r = ref_round(x, 10, -14);
  if (std::fabs(r) >= 65536.0) return std::copysign(INFINITY, x);
  return static_cast<float>(r);
}

// e4m3fn per the header contract: saturates to +-448 instead of producing NaN.
float ref_e4m3(float x) {
  if (std::isinf(x)) return std::copysign(448.0f, x);
  const double r = ref_round(x, 3, -6);
  return static_cast<float>(std::copysign(std::min(std::fabs(r), 448.0), r));
}

// Independent decoders (value formula, not bit placement).
double decode_f16(uint16_t h) {
  const int s = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double v;
  if (e == 0) v = std::ldexp(m, -24);
  else if (e == 31) v = m ? NAN : INFINITY;
  else v = std::ldexp(1.0 + m / 1024.0, e - 15);
  return s ? -v : v;
}

double decode_e4m3(uint8_t b) {
  const int s = b >> 7, e = (b >> 3) & 0xf, m = b & 7;
  double v;
  if (e == 15 && m == 7) v = NAN;
  else if (e == 0) v = std::ldexp(m, -9);
  else v = std::ldexp(1.0 + m / 8.0, e - 7);
  return s ? -v : v;
}

// Low halves that sit on the rounding decision points of a bf16 conversion.
const uint32_t kLowHalves[] = {0x0000, 0x0001, 0x3fff, 0x4000, 0x7ffe, 0x7fff,
                               0x8000, 0x8001, 0xbfff, 0xc000, 0xfffe, 0xffff};

// Calls fn(bits) for every fp32 whose high 16 bits are anything and whose low 16
// bits are one of kLowHalves, then for a million random patterns.
template <typename Fn>
void for_interesting_f32(Fn fn) {
  for (uint32_t hi = 0; hi < 0x10000u; ++hi)
    for (uint32_t lo : kLowHalves) fn((hi << 16) | lo);
  std::mt19937 rng(12345);
  for (int i = 0; i < 1000000; ++i) fn(static_cast<uint32_t>(rng()));
}

// ---------------------------------------------------------------- bf16

TEST(Bf16, MatchesFloat64ReferenceOnInterestingPatterns) {
  int64_t failures = 0;
  for_interesting_f32([&](uint32_t u) {
    const float x = bits_f32(u);
    const uint16_t got = f32_to_bf16_bits(x);
    if (std::isnan(x)) {
      // NaN stays NaN, sign kept, quiet bit set (never turns into infinity).
      const bool ok = std::isnan(bf16_bits_to_f32(got)) && (got & 0x8000u) == ((u >> 16) & 0x8000u) &&
                      (got & 0x0040u) != 0;
      if (!ok && failures++ < 10) ADD_FAILURE() << std::hex << "NaN 0x" << u << " -> 0x" << got;
      return;
    }
    const float want = ref_bf16(x);
    if (f32_bits(bf16_bits_to_f32(got)) != f32_bits(want) && failures++ < 10)
      ADD_FAILURE() << std::hex << "x=0x" << u << " got 0x" << got << " want 0x" << (f32_bits(want) >> 16);
  });
  EXPECT_EQ(failures, 0);
}

TEST(Bf16, TiesRoundToEven) {
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: even (1) wins.
  EXPECT_EQ(f32_to_bf16_bits(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  // 1 + 3*2^-8 is halfway between 1+2^-7 (odd) and 1+2^-6 (even): rounds up.
  EXPECT_EQ(f32_to_bf16_bits(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  // Just above the tie rounds up, just below rounds down.
  EXPECT_EQ(f32_to_bf16_bits(bits_f32(0x3f808001u)), 0x3f81);
  EXPECT_EQ(f32_to_bf16_bits(bits_f32(0x3f807fffu)), 0x3f80);
  // Negative ties mirror the positive ones.
  EXPECT_EQ(f32_to_bf16_bits(bits_f32(0xbf808000u)), 0xbf80);
  EXPECT_EQ(f32_to_bf16_bits(bits_f32(0xbf818000u)), 0xbf82);
}

TEST(Bf16, SubnormalsZerosAndOverflow) {
  EXPECT_EQ(f32_to_bf16_bits(0.0f), 0x0000);
  EXPECT_EQ(f32_to_bf16_bits(-0.0f), 0x8000);
  // Smallest fp32 subnormal is far below half a bf16 subnormal ulp: flushes to signed zero.
  EXPECT_EQ(f32_to_bf16_bits(bits_f32(0x00000001u)), 0x0000);
  EXPECT_EQ(f32_to_bf16_bits(bits_f32(0x80000001u)), 0x8000);
  // Half the smallest bf16 subnormal (tie) goes to zero; a bit more goes to 0x0001.
  EXPECT_EQ(f32_to_bf16_bits(bits_f32(0x00008000u)), 0x0000);
  EXPECT_EQ(f32_to_bf16_bits(bits_f32(0x00008001u)), 0x0001);
  EXPECT_EQ(f32_to_bf16_bits(bits_f32(0x00018000u)), 0x0002);  // tie from odd 1 to even 2
  // Largest bf16 subnormal rounding up into the smallest normal.
  EXPECT_EQ(f32_to_bf16_bits(bits_f32(0x007fffffu)), 0x0080);
  // Max finite bf16 is kept; the tie above it (odd significand) overflows to inf.
  EXPECT_EQ(f32_to_bf16_bits(bits_f32(0x7f7f0000u)), 0x7f7f);
  EXPECT_EQ(f32_to_bf16_bits(bits_f32(0x7f7f7fffu)), 0x7f7f);
  EXPECT_EQ(f32_to_bf16_bits(bits_f32(0x7f7f8000u)), 0x7f80);
  EXPECT_EQ(f32_to_bf16_bits(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(f32_to_bf16_bits(-std::numeric_limits<float>::max()), 0xff80);
  EXPECT_EQ(f32_to_bf16_bits(INFINITY), 0x7f80);
  EXPECT_EQ(f32_to_bf16_bits(-INFINITY), 0xff80);
  EXPECT_FLOAT_EQ(bf16_bits_to_f32(0x7f7f), 3.38953139e38f);
}

TEST(Bf16, NanPayloadStaysNan) {
  // Payloads only in the low 16 bits would truncate to an infinity pattern; they must not.
  for (uint32_t u : {0x7f800001u, 0x7f80ffffu, 0x7fc00000u, 0x7fffffffu, 0xff800001u, 0xffc00001u, 0x7fbf0000u}) {
    const uint16_t b = f32_to_bf16_bits(bits_f32(u));
    EXPECT_TRUE(std::isnan(bf16_bits_to_f32(b))) << std::hex << u << " -> " << b;
    EXPECT_EQ(b & 0x8000u, (u >> 16) & 0x8000u) << std::hex << u;
  }
  EXPECT_TRUE(std::isnan(round_bf16(std::nanf(""))));
}

TEST(Bf16, KnownValuesAndExactRoundTrip) {
  EXPECT_EQ(f32_to_bf16_bits(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16_bits(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_bf16_bits(3.14159265f), 0x4049);
  EXPECT_EQ(f32_to_bf16_bits(0.1f), 0x3dcd);
  EXPECT_EQ(bf16::from_f32(1.5f).bits, 0x3fc0);
  EXPECT_EQ(bf16::from_f32(1.5f).f32(), 1.5f);
  EXPECT_EQ(round_bf16(1.00390625f), 1.0f);  // 1 + 2^-8: tie to even
  // Every non-NaN bf16 value converts back to itself.
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const float v = bf16_bits_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(v)) continue;
    ASSERT_EQ(f32_to_bf16_bits(v), h) << std::hex << h;
  }
}

// ---------------------------------------------------------------- f16

TEST(F16, AllCodesDecodeAndRoundTrip) {
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const uint16_t c = static_cast<uint16_t>(h);
    const float v = f16_bits_to_f32(c);
    const double want = decode_f16(c);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(v)) << std::hex << h;
      ASSERT_TRUE(std::isnan(f16_bits_to_f32(f32_to_f16_bits(v)))) << std::hex << h;
      continue;
    }
    ASSERT_EQ(static_cast<double>(v), want) << std::hex << h;
    ASSERT_EQ(std::signbit(v), (h & 0x8000u) != 0) << std::hex << h;
    ASSERT_EQ(f32_to_f16_bits(v), c) << std::hex << h;
  }
}

TEST(F16, MatchesFloat64ReferenceOnInterestingPatterns) {
  int64_t failures = 0;
  for_interesting_f32([&](uint32_t u) {
    const float x = bits_f32(u);
    const uint16_t got = f32_to_f16_bits(x);
    if (std::isnan(x)) {
      if (!std::isnan(f16_bits_to_f32(got)) && failures++ < 10) ADD_FAILURE() << std::hex << "NaN 0x" << u;
      return;
    }
    const float want = ref_f16(x);
    if (f32_bits(f16_bits_to_f32(got)) != f32_bits(want) && failures++ < 10)
      ADD_FAILURE() << std::hex << "x=0x" << u << " (" << x << ") got 0x" << got << " want " << want;
  });
  EXPECT_EQ(failures, 0);
}

TEST(F16, MidpointsBetweenAllAdjacentCodesTieToEven) {
  // Midpoints of neighbouring positive halves have 12 significant bits: exact in fp32.
  for (uint32_t h = 0; h < 0x7bffu; ++h) {
    const float lo = f16_bits_to_f32(static_cast<uint16_t>(h));
    const float hi = f16_bits_to_f32(static_cast<uint16_t>(h + 1));
    const float mid = static_cast<float>((static_cast<double>(lo) + hi) / 2);
    const uint16_t even = (h & 1) ? static_cast<uint16_t>(h + 1) : static_cast<uint16_t>(h);
    ASSERT_EQ(f32_to_f16_bits(mid), even) << std::hex << h;
    ASSERT_EQ(f32_to_f16_bits(std::nextafter(mid, 0.0f)), h) << std::hex << h;
    ASSERT_EQ(f32_to_f16_bits(std::nextafter(mid, INFINITY)), h + 1) << std::hex << h;
    ASSERT_EQ(f32_to_f16_bits(-mid), even | 0x8000u) << std::hex << h;
  }
}

TEST(F16, KnownValuesAndOverflow) {
  EXPECT_EQ(f32_to_f16_bits(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16_bits(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_f16_bits(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16_bits(std::nextafter(65520.0f, 0.0f)), 0x7bff);
  EXPECT_EQ(f32_to_f16_bits(65520.0f), 0x7c00);  // tie above max (odd) -> inf
  EXPECT_EQ(f32_to_f16_bits(-1e9f), 0xfc00);
  EXPECT_EQ(f32_to_f16_bits(INFINITY), 0x7c00);
  EXPECT_EQ(f32_to_f16_bits(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(f32_to_f16_bits(std::ldexp(1.0f, -25)), 0x0000);  // tie to even zero
  EXPECT_EQ(f32_to_f16_bits(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(f32_to_f16_bits(-std::ldexp(1.0f, -26)), 0x8000);
  EXPECT_EQ(f32_to_f16_bits(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(f32_to_f16_bits(0.333333343f), 0x3555);
  EXPECT_EQ(f16_bits_to_f32(0x3555), 0.333251953125f);
  EXPECT_TRUE(std::isinf(f16_bits_to_f32(0x7c00)));
  EXPECT_TRUE(std::isnan(f16_bits_to_f32(0x7e00)));
}

// ---------------------------------------------------------------- float8 e4m3fn

TEST(F8E4M3, AllCodesDecodeAndRoundTrip) {
  for (uint32_t b = 0; b < 256; ++b) {
    const uint8_t c = static_cast<uint8_t>(b);
    const float v = f8e4m3_bits_to_f32(c);
    const double want = decode_e4m3(c);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(v)) << std::hex << b;
      EXPECT_TRUE(std::isnan(f8e4m3_bits_to_f32(f32_to_f8e4m3_bits(v)))) << std::hex << b;
      continue;
    }
    EXPECT_EQ(static_cast<double>(v), want) << std::hex << b;
    EXPECT_EQ(std::signbit(v), (b & 0x80u) != 0) << std::hex << b;
    EXPECT_EQ(f32_to_f8e4m3_bits(v), c) << std::hex << b << " value " << v;
  }
}

TEST(F8E4M3, MatchesFloat64ReferenceOnInterestingPatterns) {
  int64_t failures = 0;
  for_interesting_f32([&](uint32_t u) {
    const float x = bits_f32(u);
    const uint8_t got = f32_to_f8e4m3_bits(x);
    if (std::isnan(x)) {
      if (!std::isnan(f8e4m3_bits_to_f32(got)) && failures++ < 10) ADD_FAILURE() << std::hex << "NaN 0x" << u;
      return;
    }
    const float want = ref_e4m3(x);
    if (f32_bits(f8e4m3_bits_to_f32(got)) != f32_bits(want) && failures++ < 10)
      ADD_FAILURE() << std::hex << "x=0x" << u << " (" << x << ") got 0x" << int(got) << " want " << want;
  });
  EXPECT_EQ(failures, 0);
}

TEST(F8E4M3, MidpointsTieToEven) {
  for (uint32_t b = 0; b < 0x7e; ++b) {
    const float lo = f8e4m3_bits_to_f32(static_cast<uint8_t>(b));
    const float hi = f8e4m3_bits_to_f32(static_cast<uint8_t>(b + 1));
    const float mid = (lo + hi) / 2;  // exact: 5 significant bits
    const uint8_t even = static_cast<uint8_t>((b & 1) ? b + 1 : b);
    EXPECT_EQ(f32_to_f8e4m3_bits(mid), even) << std::hex << b;
    EXPECT_EQ(f32_to_f8e4m3_bits(std::nextafter(mid, 0.0f)), b) << std::hex << b;
    EXPECT_EQ(f32_to_f8e4m3_bits(std::nextafter(mid, INFINITY)), b + 1) << std::hex << b;
  }
}

TEST(F8E4M3, KnownValuesZeroAndSaturation) {
  EXPECT_EQ(f32_to_f8e4m3_bits(0.0f), 0x00);
  EXPECT_EQ(f32_to_f8e4m3_bits(-0.0f), 0x80);
  EXPECT_EQ(f32_to_f8e4m3_bits(1.0f), 0x38);
  EXPECT_EQ(f32_to_f8e4m3_bits(-1.5f), 0xbc);
  EXPECT_EQ(f32_to_f8e4m3_bits(448.0f), 0x7e);
  EXPECT_EQ(f32_to_f8e4m3_bits(1e6f), 0x7e);  // saturates, never NaN
  EXPECT_EQ(f32_to_f8e4m3_bits(-INFINITY), 0xfe);
  EXPECT_EQ(f32_to_f8e4m3_bits(std::ldexp(1.0f, -9)), 0x01);   // smallest subnormal
  EXPECT_EQ(f32_to_f8e4m3_bits(std::ldexp(1.0f, -10)), 0x00);  // tie to even zero
  EXPECT_EQ(f32_to_f8e4m3_bits(std::ldexp(1.0f, -6)), 0x08);   // smallest normal
  EXPECT_EQ(f32_to_f8e4m3_bits(1e-30f), 0x00);
  EXPECT_EQ(f8e4m3_bits_to_f32(0x7e), 448.0f);
  EXPECT_EQ(f8e4m3_bits_to_f32(0x01), std::ldexp(1.0f, -9));
  EXPECT_TRUE(std::isnan(f8e4m3_bits_to_f32(0x7f)));
  EXPECT_TRUE(std::isnan(f8e4m3_bits_to_f32(0xff)));
  EXPECT_TRUE(std::isnan(f8e4m3_bits_to_f32(f32_to_f8e4m3_bits(NAN))));
}

// ---------------------------------------------------------------- names, sizes

TEST(DType, NamesAndSizesRoundTrip) {
  for (DType t : {DType::F32, DType::BF16, DType::F16, DType::F8E4M3, DType::I32, DType::I64, DType::U8,
                  DType::BOOL}) {
    DType back = DType::U8;
    ASSERT_TRUE(dtype_from_name(dtype_name(t), &back)) << dtype_name(t);
    EXPECT_EQ(back, t);
  }
  DType d;
  EXPECT_FALSE(dtype_from_name("F64", &d));
  EXPECT_FALSE(dtype_from_name("bf16", &d));  // safetensors names are case-sensitive
  EXPECT_EQ(dtype_name(DType::F8E4M3), "F8_E4M3");
  EXPECT_EQ(dtype_size(DType::BF16), 2u);
  EXPECT_EQ(dtype_size(DType::F8E4M3), 1u);
  EXPECT_EQ(dtype_size(DType::I64), 8u);
}

// ---------------------------------------------------------------- Tensor

TEST(Tensor, ConvertsWithTheScalarRounding) {
  const std::vector<float> v = {0.0f, -0.0f, 1.00390625f, 3.14159265f, 1e6f, -1e-30f, 65520.0f, 0.1f};
  Tensor f = Tensor::from_f32({2, 4}, v);
  Tensor b = f.to(DType::BF16), h = f.to(DType::F16), e = f.to(DType::F8E4M3);
  ASSERT_EQ(b.shape(), (Shape{2, 4}));
  ASSERT_EQ(b.dtype(), DType::BF16);
  for (size_t i = 0; i < v.size(); ++i) {
    EXPECT_EQ(b.data_as<uint16_t>()[i], f32_to_bf16_bits(v[i])) << i;
    EXPECT_EQ(h.data_as<uint16_t>()[i], f32_to_f16_bits(v[i])) << i;
    EXPECT_EQ(e.data_as<uint8_t>()[i], f32_to_f8e4m3_bits(v[i])) << i;
    EXPECT_EQ(f32_bits(b.to(DType::F32).data_as<float>()[i]), f32_bits(round_bf16(v[i]))) << i;
  }
  // Zero-filled tensors stay zero through every float dtype.
  Tensor z = Tensor::zeros({3}, DType::F32).to(DType::F8E4M3).to(DType::F32);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(z.get_f32(i), 0.0f);
}

TEST(Tensor, ViewsShareStorage) {
  Tensor t = Tensor::from_f32({3, 4}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  Tensor rows = t.slice_rows(1, 3);
  EXPECT_EQ(rows.shape(), (Shape{2, 4}));
  EXPECT_EQ(rows.get_f32(0), 4.0f);
  Tensor cols = t.slice_cols(1, 3);
  EXPECT_EQ(cols.shape(), (Shape{3, 2}));
  EXPECT_EQ(cols.row_stride(), 4);
  EXPECT_FALSE(cols.is_contiguous());
  EXPECT_EQ(cols.data_as<float>()[4], 5.0f);  // row 1, col 0 of the view
  Tensor r = t.reshape({4, 3});
  r.data_as<float>()[0] = 42.0f;
  EXPECT_EQ(t.get_f32(0), 42.0f);  // a view, not a copy
  Tensor c = t.clone();
  c.data_as<float>()[0] = 7.0f;
  EXPECT_EQ(t.get_f32(0), 42.0f);
  EXPECT_EQ(t.size(-1), 4);
  EXPECT_EQ(t.numel(), 12);
  EXPECT_EQ(t.nbytes(), 48u);
}

TEST(Tensor, ErrorsNameTheProblem) {
  Tensor t = Tensor::from_f32({3, 4}, std::vector<float>(12, 0.0f));
  EXPECT_TRUE(throws_with([&] { t.reshape({5, 3}); }, {"cannot reshape", "[3, 4]", "[5, 3]"}));
  EXPECT_TRUE(throws_with([&] { t.slice_rows(2, 4); }, {"row slice", "[3, 4]"}));
  EXPECT_TRUE(throws_with([&] { t.slice_cols(1, 3).reshape({6}); }, {"non-contiguous"}));
  EXPECT_TRUE(throws_with([&] { t.size(2); }, {"dimension 2", "[3, 4]"}));
  EXPECT_TRUE(throws_with([&] { Tensor::from_f32({2, 2}, {1, 2, 3}); }, {"3 values", "[2, 2]"}));
  EXPECT_TRUE(throws_with([&] { Tensor::empty({2, -1}, DType::F32); }, {"negative dimension"}));
  EXPECT_TRUE(throws_with([&] { check_tensor(t, {4, 3}, DType::BF16, "layer.w"); },
                          {"layer.w", "[4, 3]", "BF16", "[3, 4]", "F32"}));
  EXPECT_TRUE(throws_with([&] { t.to(DType::I32); }, {"unsupported conversion", "F32", "I32"}));
}

}  // namespace
}  // namespace magi2
