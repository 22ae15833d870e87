// 3-D convolution over channels-last activations (ops.h Conv3dParams).
// im2col per output row: for one (t_out, h_out) the patches of all W_out
// positions are gathered into an fp32 block [W_out, K] (K = kT*kH*kW*C_in,
// the weight's own order), then a small GEMM against the transposed weights
// [K, C_out] in register blocks of 4 positions x 8 channels, each output
// summed over k in ascending order. One thread owns one output row, and an
// output's sum never depends on its neighbours, so the result is the same
// for any thread count.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "cpu/cpu_common.h"
#include "cpu/cpu_ops.h"
#include "ops/codec_checks.h"

namespace magi2 {

Tensor conv_weight_channels_last(const Tensor& w, DType dtype) {
  MAGI2_CHECK(w.defined() && w.device() == Device::CPU && w.is_contiguous(),
              "conv weight: expected a contiguous CPU tensor");
  MAGI2_CHECK(w.dim() == 5 || w.dim() == 4, "conv weight: expected [C_out, C_in, kT, kH, kW] or [C_out, C_in, kH, kW], got ",
              shape_str(w.shape()));
  MAGI2_CHECK(dtype == DType::F32 || dtype == DType::BF16, "conv weight: target dtype must be f32 or bf16");
  const int64_t co = w.size(0), ci = w.size(1);
  const int64_t kt = w.dim() == 5 ? w.size(2) : 1, kh = w.size(-2), kw = w.size(-1);
  Tensor out = Tensor::empty({co, kt, kh, kw, ci}, dtype);
  const int64_t taps = kt * kh * kw;
  for (int64_t o = 0; o < co; ++o)
    for (int64_t i = 0; i < ci; ++i)
      for (int64_t k = 0; k < taps; ++k) {
        const float v = w.get_f32((o * ci + i) * taps + k);
        const int64_t dst = (o * taps + k) * ci + i;
        if (dtype == DType::F32)
          out.data_as<float>()[dst] = v;
        else
          out.data_as<uint16_t>()[dst] = f32_to_bf16_bits(v);
      }
  return out;
}

namespace cpu {
namespace {

// Register block of the GEMM micro-kernel: kPos output positions x kCo
// output channels.
constexpr int64_t kPos = 4;
constexpr int64_t kCo = 8;

// 8-lane fp32 vector (GCC/Clang vector extension): two SSE registers on a
// baseline x86-64 build, one AVX register in the avx2 clone below.
typedef float v8f __attribute__((vector_size(32)));

// c[p*ldc + j] = sum_k a[p*K + k] * b[k*ldb + j] for p < kPos, j < kCo, summed
// in ascending k with separate multiply and add (a fixed order: one output's
// sum depends only on its patch and weights, not on its neighbours, the
// thread count or the instruction set chosen at run time; no FMA).
__attribute__((target_clones("avx2", "default"))) void micro_kernel(const float* a, int64_t K, const float* b,
                                                                    int64_t ldb, float* c, int64_t ldc) {
  static_assert(kPos == 4 && kCo == 8);
  v8f c0 = {}, c1 = {}, c2 = {}, c3 = {};
  const float *a0 = a, *a1 = a + K, *a2 = a + 2 * K, *a3 = a + 3 * K;
  for (int64_t k = 0; k < K; ++k) {
    v8f bk;
    std::memcpy(&bk, b + k * ldb, sizeof bk);
    const v8f p0 = bk * a0[k], p1 = bk * a1[k], p2 = bk * a2[k], p3 = bk * a3[k];
    c0 += p0;
    c1 += p1;
    c2 += p2;
    c3 += p3;
  }
  std::memcpy(c, &c0, sizeof c0);
  std::memcpy(c + ldc, &c1, sizeof c1);
  std::memcpy(c + 2 * ldc, &c2, sizeof c2);
  std::memcpy(c + 3 * ldc, &c3, sizeof c3);
}

}  // namespace

void conv3d(const Conv3dParams& p) {
  const Conv3dDims d = check_conv3d(p, Device::CPU);
  const DType dt = p.x.dtype();
  const int64_t T = d.in[0], H = d.in[1], W = d.in[2], ci = d.cin, co = d.cout;
  const int64_t* kdim = d.kernel.data();
  const int64_t* out = d.out.data();
  const int64_t K = kdim[0] * kdim[1] * kdim[2] * ci;
  // Weights transposed to [K, C_out padded to kCo] fp32 (bf16 -> f32 is exact),
  // so the micro-kernel reads kCo consecutive output channels per tap.
  const int64_t co_pad = (co + kCo - 1) / kCo * kCo;
  std::vector<float> wt(static_cast<size_t>(K * co_pad), 0.f);
  for (int64_t o = 0; o < co; ++o)
    for (int64_t k = 0; k < K; ++k) wt[k * co_pad + o] = p.w.get_f32(o * K + k);
  std::vector<float> bias(static_cast<size_t>(co), 0.f);
  for (int64_t o = 0; o < co && p.bias.defined(); ++o) bias[o] = p.bias.get_f32(o);
  // fp32 copy of a bf16 input, so the gather below is plain copies.
  std::vector<float> xconv;
  const bool bf = dt == DType::BF16;
  const float* xf = bf ? nullptr : p.x.data_as<float>();
  if (bf) {
    xconv.resize(static_cast<size_t>(p.x.numel()));
    const uint16_t* xs = p.x.data_as<uint16_t>();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < p.x.numel(); ++i) xconv[i] = bf16_bits_to_f32(xs[i]);
    xf = xconv.data();
  }

  const bool dense_w = p.dilation[2] == 1;
  const int64_t Wo = out[2];
  const int64_t wo_pad = (Wo + kPos - 1) / kPos * kPos;
  const int64_t rows = out[0] * out[1];
  const int64_t esize = static_cast<int64_t>(dtype_size(dt));
#pragma omp parallel
  {
    // Patches of one output row: patch[wo, ((kt*kH + kh)*kW + kw)*C_in + c];
    // rows past Wo stay zero (their results are discarded).
    std::vector<float> patch(static_cast<size_t>(wo_pad * K), 0.f);
    std::vector<float> res(static_cast<size_t>(wo_pad * co_pad));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t to = r / out[1], ho = r % out[1];
      for (int64_t wo = 0; wo < Wo; ++wo) {
        float* dst = patch.data() + wo * K;
        for (int64_t kt = 0; kt < kdim[0]; ++kt) {
          int64_t ti = to * p.stride[0] + kt * p.dilation[0] - p.pad_front[0];
          bool tz = ti < 0 || ti >= T;
          if (tz && p.time_pad == TimePad::Replicate) {
            ti = std::clamp<int64_t>(ti, 0, T - 1);
            tz = false;
          }
          for (int64_t kh = 0; kh < kdim[1]; ++kh) {
            const int64_t hi = ho * p.stride[1] + kh * p.dilation[1] - p.pad_front[1];
            const int64_t w0 = wo * p.stride[2] - p.pad_front[2];
            if (dense_w && !tz && hi >= 0 && hi < H && w0 >= 0 && w0 + kdim[2] <= W) {
              // All kW taps inside the row: one contiguous run of kW*C_in values.
              std::memcpy(dst, xf + ((ti * H + hi) * W + w0) * ci, static_cast<size_t>(kdim[2] * ci) * 4);
              dst += kdim[2] * ci;
              continue;
            }
            for (int64_t kw = 0; kw < kdim[2]; ++kw, dst += ci) {
              const int64_t wi = wo * p.stride[2] + kw * p.dilation[2] - p.pad_front[2];
              if (tz || hi < 0 || hi >= H || wi < 0 || wi >= W)
                std::fill(dst, dst + ci, 0.f);
              else
                std::memcpy(dst, xf + ((ti * H + hi) * W + wi) * ci, static_cast<size_t>(ci) * 4);
            }
          }
        }
      }
      for (int64_t wo = 0; wo < wo_pad; wo += kPos)
        for (int64_t o = 0; o < co_pad; o += kCo)
          micro_kernel(patch.data() + wo * K, K, wt.data() + o, co_pad, res.data() + wo * co_pad + o, co_pad);
      char* yrow = static_cast<char*>(p.y.data()) + (r * Wo * co) * esize;
      for (int64_t wo = 0; wo < Wo; ++wo) {
        const float* acc = res.data() + wo * co_pad;
        if (bf) {
          uint16_t* y = reinterpret_cast<uint16_t*>(yrow) + wo * co;
          for (int64_t o = 0; o < co; ++o) y[o] = f32_to_bf16_bits(round_bf16(acc[o]) + bias[o]);
        } else {
          float* y = reinterpret_cast<float*>(yrow) + wo * co;
          for (int64_t o = 0; o < co; ++o) y[o] = acc[o] + bias[o];
        }
      }
    }
  }
}

}  // namespace cpu
}  // namespace magi2
