// 3-D convolution over channels-last activations (ops.h Conv3dParams).
// im2col per output row: for one (t_out, h_out) the patches of all W_out
// positions are gathered into an fp32 block [W_out, K] (K = kT*kH*kW*C_in,
// the weight's own order), then every output channel is one fixed-order fp32
// dot product with its weight row. One thread owns one output row, so the
// result does not depend on the thread count.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "cpu/cpu_common.h"
#include "cpu/cpu_ops.h"

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

void check_4d(const Tensor& t, const char* what) {
  MAGI2_CHECK(t.defined() && t.device() == Device::CPU, what, ": expected a CPU tensor");
  MAGI2_CHECK(t.dim() == 4 && t.is_contiguous(), what, ": expected a contiguous [T, H, W, C] tensor, got ",
              shape_str(t.shape()));
}

}  // namespace

void conv3d(const Conv3dParams& p) {
  check_4d(p.x, "conv3d.x");
  check_4d(p.y, "conv3d.y");
  const DType dt = p.x.dtype();
  MAGI2_CHECK(dt == DType::F32 || dt == DType::BF16, "conv3d.x: expected f32 or bf16");
  MAGI2_CHECK(p.y.dtype() == dt && p.w.dtype() == dt, "conv3d: x, w and y must share one dtype");
  MAGI2_CHECK(p.w.dim() == 5 && p.w.is_contiguous(), "conv3d.w: expected contiguous [C_out, kT, kH, kW, C_in], got ",
              shape_str(p.w.shape()));
  const int64_t T = p.x.size(0), H = p.x.size(1), W = p.x.size(2), ci = p.x.size(3);
  const int64_t co = p.w.size(0);
  const int64_t kdim[3] = {p.w.size(1), p.w.size(2), p.w.size(3)};
  MAGI2_CHECK(p.w.size(4) == ci, "conv3d.w: C_in ", p.w.size(4), " does not match x's ", ci, " channels");
  const int64_t in[3] = {T, H, W};
  int64_t out[3];
  for (int a = 0; a < 3; ++a) {
    MAGI2_CHECK(p.stride[a] >= 1 && p.dilation[a] >= 1 && p.pad_front[a] >= 0 && p.pad_back[a] >= 0,
                "conv3d: stride/dilation must be >= 1 and padding >= 0");
    const int64_t span = in[a] + p.pad_front[a] + p.pad_back[a] - p.dilation[a] * (kdim[a] - 1) - 1;
    MAGI2_CHECK(span >= 0, "conv3d: input ", shape_str(p.x.shape()), " is smaller than the kernel");
    out[a] = span / p.stride[a] + 1;
  }
  check_tensor(p.y, {out[0], out[1], out[2], co}, dt, "conv3d.y");
  if (p.bias.defined())
    MAGI2_CHECK(p.bias.dtype() == dt && p.bias.numel() == co && p.bias.is_contiguous(), "conv3d.bias: expected ", co,
                " values of the activation dtype, got ", shape_str(p.bias.shape()));
  MAGI2_CHECK(p.x.data() != p.y.data(), "conv3d: y must not alias x");

  const int64_t K = kdim[0] * kdim[1] * kdim[2] * ci;
  // fp32 weights once per call (bf16 -> f32 is exact).
  std::vector<float> wf(static_cast<size_t>(co * K));
  for (int64_t i = 0; i < co * K; ++i) wf[i] = p.w.get_f32(i);
  std::vector<float> bias(static_cast<size_t>(co), 0.f);
  for (int64_t o = 0; o < co && p.bias.defined(); ++o) bias[o] = p.bias.get_f32(o);

  const bool bf = dt == DType::BF16;
  const char* xb = static_cast<const char*>(p.x.data());
  const int64_t esize = static_cast<int64_t>(dtype_size(dt));
  const int64_t Wo = out[2];
  const int64_t rows = out[0] * out[1];
#pragma omp parallel
  {
    std::vector<float> patch(static_cast<size_t>(Wo * K));
    std::vector<float> acc(static_cast<size_t>(co));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t to = r / out[1], ho = r % out[1];
      // Gather: patch[wo, ((kt*kH + kh)*kW + kw)*C_in + c].
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
            for (int64_t kw = 0; kw < kdim[2]; ++kw, dst += ci) {
              const int64_t wi = wo * p.stride[2] + kw * p.dilation[2] - p.pad_front[2];
              if (tz || hi < 0 || hi >= H || wi < 0 || wi >= W) {
                std::fill(dst, dst + ci, 0.f);
                continue;
              }
              const char* src = xb + (((ti * H + hi) * W + wi) * ci) * esize;
              if (bf) {
                const uint16_t* s = reinterpret_cast<const uint16_t*>(src);
                for (int64_t c = 0; c < ci; ++c) dst[c] = bf16_bits_to_f32(s[c]);
              } else {
                std::memcpy(dst, src, static_cast<size_t>(ci) * 4);
              }
            }
          }
        }
      }
      char* yrow = static_cast<char*>(p.y.data()) + (r * Wo * co) * esize;
      for (int64_t wo = 0; wo < Wo; ++wo) {
        const float* a = patch.data() + wo * K;
        for (int64_t o = 0; o < co; ++o) acc[o] = dot_f32(a, wf.data() + o * K, K);
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
