// Element-wise and small kernels of the Qwen3.5 text encoder on the CUDA
// backend (text_ops.h): the causal depthwise conv1d (+ SiLU), the gated
// RMSNorm, the partial rotary embedding and the two gated products. The
// element formulas are ops/text_numerics.h, shared with the CPU backend;
// built with --fmad=false and with glibc expf's exponential, so every op but
// rotary (cos/sin) gives the CPU's bytes.
#include <cstdint>

#include "cuda/cuda_common.h"
#include "cuda/device_fp.cuh"
#include "cuda/text_ops.h"
#include "ops/text_checks.h"
#include "ops/text_numerics.h"

namespace magi2::cuda {

namespace {

constexpr int kThreads = 256;

using dev::load_f32;
using dev::store_f32;

// Grid for a grid-stride loop over n elements (a few waves; the loop covers the rest).
unsigned blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 65536 ? (b > 0 ? b : 1) : 65536);
}

template <typename T>
T* ptr(const Tensor& t) {
  return static_cast<T*>(t.data());
}

// One thread per (row t, channel c): the K taps in the CPU's order, the taps
// before row 0 reading zeros (multiplied, as the CPU does).
template <typename T>
__global__ void causal_conv1d_kernel(const T* __restrict__ x, int64_t ldx, const T* __restrict__ w,
                                     T* __restrict__ y, int64_t ldy, int64_t rows, int64_t ch, int64_t kk,
                                     bool silu, bool bf) {
  const int64_t n = rows * ch;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = e / ch, c = e % ch;
    float acc = 0.f;
    for (int64_t k = 0; k < kk; ++k) {
      const int64_t src = t - kk + 1 + k;
      const float xv = src < 0 ? 0.f : load_f32(x + src * ldx + c);
      acc += load_f32(w + c * kk + k) * xv;
    }
    store_f32(y + t * ldy + c, conv1d_output(acc, silu, bf));
  }
}

// One 16-lane group per (row, head) d-vector: lane j sums x_i^2 over i = j
// (mod 16) in increasing i, the 16 sums meet in the tree 8, 4, 2, 1 (the CPU's
// dot_f32), so rs and every output are the CPU's bits.
template <typename T>
__global__ void gated_rms_norm_kernel(const T* __restrict__ x, int64_t ldx, const T* __restrict__ z, int64_t ldz,
                                      const float* __restrict__ w, T* __restrict__ y, int64_t ldy, int64_t rows,
                                      int64_t heads, int64_t d, float eps, bool bf) {
  const int64_t vec = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 16;
  const int lane = threadIdx.x & 15;
  if (vec >= rows * heads) return;  // whole 16-lane groups leave together
  const int64_t r = vec / heads, h = vec % heads;
  const T* xv = x + r * ldx + h * d;
  const T* zv = z + r * ldz + h * d;
  T* yv = y + r * ldy + h * d;
  const unsigned mask = (threadIdx.x & 16) ? 0xffff0000u : 0x0000ffffu;
  const float ss = __shfl_sync(mask, dev::sum_squares16(xv, d), 0, 16);
  const float ms = ss * (1.0f / static_cast<float>(d));
  const float rs = 1.0f / sqrtf(ms + eps);
  for (int64_t i = lane; i < d; i += 16)
    store_f32(yv + i, gated_rms_element(load_f32(xv + i), rs, w[i], load_f32(zv + i), bf));
}

// One thread per (row, head, pair i < rotary_dim / 2), in place; the position is the row index.
template <typename T>
__global__ void rotary_kernel(T* x, int64_t ldx, const float* __restrict__ inv_freq, int64_t rows, int64_t heads,
                              int64_t hd, int64_t half, bool bf) {
  const int64_t n = rows * heads * half;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = e / (heads * half), h = (e / half) % heads, i = e % half;
    const float f = static_cast<float>(r) * inv_freq[i];
    const double fd = static_cast<double>(f);
    const float c = text_round(static_cast<float>(cos(fd)), bf), s = text_round(static_cast<float>(sin(fd)), bf);
    T* v = x + r * ldx + h * hd;
    float y1, y2;
    rotary_pair(load_f32(v + i), load_f32(v + i + half), c, s, bf, y1, y2);
    store_f32(v + i, y1);
    store_f32(v + i + half, y2);
  }
}

// out = x * act(g), act = sigmoid (kSilu false) or silu; out may alias x or g.
template <typename T, bool kSilu>
__global__ void gated_product_kernel(const T* x, int64_t ldx, const T* g, int64_t ldg, T* out, int64_t ldo,
                                     int64_t rows, int64_t cols, bool bf) {
  const int64_t n = rows * cols;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = e / cols, c = e % cols;
    const float gv = load_f32(g + r * ldg + c);
    const float act = kSilu ? text_silu(gv) : text_sigmoid(gv);
    store_f32(out + r * ldo + c, gated_product(act, load_f32(x + r * ldx + c), bf));
  }
}

template <bool kSilu>
void gated_product_rows(const Tensor& x, const Tensor& g, const Tensor& out, const char* op, cudaStream_t s) {
  check_gated_product(x, g, out, op, Device::CUDA);
  const int64_t rows = out.size(0), cols = out.size(1);
  if (rows * cols == 0) return;
  const unsigned b = blocks_for(rows * cols);
  if (out.dtype() == DType::BF16)
    gated_product_kernel<uint16_t, kSilu><<<b, kThreads, 0, s>>>(ptr<uint16_t>(x), x.row_stride(), ptr<uint16_t>(g),
                                                                 g.row_stride(), ptr<uint16_t>(out), out.row_stride(),
                                                                 rows, cols, true);
  else
    gated_product_kernel<float, kSilu><<<b, kThreads, 0, s>>>(ptr<float>(x), x.row_stride(), ptr<float>(g),
                                                              g.row_stride(), ptr<float>(out), out.row_stride(), rows,
                                                              cols, false);
  MAGI2_CUDA_CHECK_LAUNCH(op);
}

}  // namespace

void causal_conv1d(const CausalConv1dParams& p, cudaStream_t s) {
  const Conv1dCausalDims d = check_causal_conv1d(p, Device::CUDA);
  if (d.rows * d.channels == 0) return;
  const unsigned b = blocks_for(d.rows * d.channels);
  if (p.x.dtype() == DType::BF16)
    causal_conv1d_kernel<<<b, kThreads, 0, s>>>(ptr<uint16_t>(p.x), p.x.row_stride(), ptr<uint16_t>(p.w),
                                                ptr<uint16_t>(p.y), p.y.row_stride(), d.rows, d.channels, d.kernel,
                                                p.silu, true);
  else
    causal_conv1d_kernel<<<b, kThreads, 0, s>>>(ptr<float>(p.x), p.x.row_stride(), ptr<float>(p.w), ptr<float>(p.y),
                                                p.y.row_stride(), d.rows, d.channels, d.kernel, p.silu, false);
  MAGI2_CUDA_CHECK_LAUNCH("causal_conv1d");
}

void gated_rms_norm(const GatedRmsNormParams& p, cudaStream_t s) {
  const int64_t d = check_gated_rms_norm(p, Device::CUDA);
  const int64_t rows = p.x.size(0);
  if (rows == 0 || d == 0) return;
  const int64_t vecs = rows * p.heads;
  const unsigned blocks = static_cast<unsigned>((vecs * 16 + kThreads - 1) / kThreads);
  if (p.x.dtype() == DType::BF16)
    gated_rms_norm_kernel<<<blocks, kThreads, 0, s>>>(ptr<uint16_t>(p.x), p.x.row_stride(), ptr<uint16_t>(p.z),
                                                      p.z.row_stride(), ptr<float>(p.w), ptr<uint16_t>(p.y),
                                                      p.y.row_stride(), rows, p.heads, d, p.eps, true);
  else
    gated_rms_norm_kernel<<<blocks, kThreads, 0, s>>>(ptr<float>(p.x), p.x.row_stride(), ptr<float>(p.z),
                                                      p.z.row_stride(), ptr<float>(p.w), ptr<float>(p.y),
                                                      p.y.row_stride(), rows, p.heads, d, p.eps, false);
  MAGI2_CUDA_CHECK_LAUNCH("gated_rms_norm");
}

void rotary(const RotaryParams& p, cudaStream_t s) {
  const RotaryDims d = check_rotary(p, Device::CUDA);
  MAGI2_CHECK(p.positions == nullptr,
              "rotary: host position vectors are not supported by the CUDA backend (positions must be the row index)");
  const int64_t n = d.rows * p.heads * d.half;
  if (n == 0) return;
  if (p.x.dtype() == DType::BF16)
    rotary_kernel<<<blocks_for(n), kThreads, 0, s>>>(ptr<uint16_t>(p.x), p.x.row_stride(), ptr<float>(p.inv_freq),
                                                     d.rows, p.heads, d.head_dim, d.half, true);
  else
    rotary_kernel<<<blocks_for(n), kThreads, 0, s>>>(ptr<float>(p.x), p.x.row_stride(), ptr<float>(p.inv_freq),
                                                     d.rows, p.heads, d.head_dim, d.half, false);
  MAGI2_CUDA_CHECK_LAUNCH("rotary");
}

void sigmoid_mul(const SigmoidMulParams& p, cudaStream_t s) {
  gated_product_rows<false>(p.x, p.g, p.out, "sigmoid_mul", s);
}

void silu_mul(const SiluMulParams& p, cudaStream_t s) { gated_product_rows<true>(p.up, p.gate, p.out, "silu_mul", s); }

}  // namespace magi2::cuda
