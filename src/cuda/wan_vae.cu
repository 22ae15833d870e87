// The Wan2.2 VAE encoder's ops on the CUDA backend (codec_ops.h): the channel
// L2 norm (+ SiLU), the AvgDown3D shortcut, single-head spatial attention and
// the latent affine, all fp32. Each output is computed by one thread in the
// CPU's order (the norm's double sum in channel order, the shortcut's group in
// order, the attention's scores in dot_f32's order and its row sum and P V in
// key order) with the formulas of ops/codec_numerics.h: the CPU's bytes.
#include <cmath>
#include <cstdint>

#include "cuda/codec_ops.h"
#include "cuda/cuda_common.h"
#include "cuda/device_fp.cuh"
#include "ops/codec_checks.h"
#include "ops/codec_numerics.h"

namespace magi2::cuda {

namespace {

constexpr int kThreads = 256;
// The attention's scores of one query live in shared memory: at most this many keys per block.
constexpr int64_t kMaxBlockRows = 48 * 1024;

unsigned blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 65536 ? (b > 0 ? b : 1) : 65536);
}

const float* fp(const Tensor& t) { return static_cast<const float*>(t.data()); }
float* fpm(const Tensor& t) { return static_cast<float*>(t.data()); }

// One thread per row: the squared norm in double in channel order, then the
// elements. y may alias x (each row is read before it is written, by one thread).
__global__ void channel_l2_norm_kernel(const float* x, int64_t ldx, const float* __restrict__ gamma, float* y,
                                       int64_t ldy, int64_t rows, int64_t cols, float root_c, bool silu) {
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < rows;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float* xr = x + r * ldx;
    double ss = 0.0;
    for (int64_t c = 0; c < cols; ++c) ss += static_cast<double>(xr[c]) * xr[c];
    const float denom = channel_l2_denom(ss);
    float* yr = y + r * ldy;
    for (int64_t c = 0; c < cols; ++c) yr[c] = channel_l2_element(xr[c], denom, root_c, gamma[c], silu);
  }
}

// One thread per output (position, channel o): the mean of folded channels [o G, (o+1) G).
__global__ void avg_down3d_kernel(const float* __restrict__ x, float* __restrict__ y, AvgDown3dDims d, int ft,
                                  int fs) {
  const int64_t n = d.to * d.ho * d.wo * d.co;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t o = e % d.co, pos = e / d.co;
    const int64_t to = pos / (d.ho * d.wo), ho = pos / d.wo % d.ho, wo = pos % d.wo;
    y[e] = avg_down3d_element(x, d.H, d.W, d.ci, d.pad_t, d.group, ft, fs, to, ho, wo, o);
  }
}

// One block per query row i of a key block of n rows: the scores by 16-lane
// groups (dot_f32's order: lane l sums channels c = l mod 16 ascending, then
// the tree 8, 4, 2, 1), the max, p = exp(s - max), the row sum by one thread in
// key order, and each output channel's P V in key order by one thread.
__global__ void __launch_bounds__(kThreads) spatial_attention_kernel(const float* __restrict__ q, int64_t ldq,
                                                                     const float* __restrict__ k, int64_t ldk,
                                                                     const float* __restrict__ v, int64_t ldv,
                                                                     float* __restrict__ o, int64_t ldo, int64_t n,
                                                                     int64_t cols, float scale) {
  extern __shared__ float s[];  // [n] scores, then probabilities
  __shared__ float red[kThreads / 32];
  __shared__ float shared_den;
  const int64_t i = blockIdx.x, b0 = i / n * n;
  const int tid = threadIdx.x, lane16 = tid & 15, group = tid >> 4;
  const float* qi = q + i * ldq;
  for (int64_t j0 = 0; j0 < n; j0 += kThreads / 16) {
    const int64_t j = j0 + group;
    float acc = 0.f;
    if (j < n) {
      const float* kj = k + (b0 + j) * ldk;
      for (int64_t c = lane16; c < cols; c += 16) acc += qi[c] * kj[c];
    }
    acc = dev::half_warp_tree(acc);
    if (lane16 == 0 && j < n) s[j] = acc * scale;
  }
  __syncthreads();
  float mx = -INFINITY;
  for (int64_t j = tid; j < n; j += kThreads) mx = fmaxf(mx, s[j]);
  for (int off = 16; off >= 1; off /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
  if ((tid & 31) == 0) red[tid >> 5] = mx;
  __syncthreads();
  mx = red[0];
  for (int w = 1; w < kThreads / 32; ++w) mx = fmaxf(mx, red[w]);
  for (int64_t j = tid; j < n; j += kThreads) s[j] = text_exp_f32(s[j] - mx);
  __syncthreads();
  if (tid == 0) {
    float den = 0.f;
    for (int64_t j = 0; j < n; ++j) den += s[j];
    shared_den = den;
  }
  __syncthreads();
  const float den = shared_den;
  for (int64_t c = tid; c < cols; c += kThreads) {
    float acc = 0.f;
    for (int64_t j = 0; j < n; ++j) acc += s[j] * v[(b0 + j) * ldv + c];
    o[i * ldo + c] = acc / den;
  }
}

__global__ void channel_affine_kernel(const float* x, int64_t ldx, const float* __restrict__ shift,
                                      const float* __restrict__ mul, float* y, int64_t ldy, int64_t rows,
                                      int64_t cols) {
  const int64_t n = rows * cols;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = e / cols, c = e % cols;
    y[r * ldy + c] = channel_affine_element(x[r * ldx + c], shift[c], mul[c]);
  }
}

}  // namespace

void channel_l2_norm(const ChannelL2NormParams& p, cudaStream_t s) {
  const auto dims = check_channel_l2_norm(p, Device::CUDA);
  const int64_t rows = dims[0], cols = dims[1];
  if (rows * cols == 0) return;
  // sqrt(C) rounded to fp32 on the host, as the CPU.
  const float root_c = static_cast<float>(std::sqrt(static_cast<double>(cols)));
  channel_l2_norm_kernel<<<blocks_for(rows), kThreads, 0, s>>>(fp(p.x), p.x.row_stride(), fp(p.gamma), fpm(p.y),
                                                               p.y.row_stride(), rows, cols, root_c, p.silu);
  MAGI2_CUDA_CHECK_LAUNCH("channel_l2_norm");
}

void avg_down3d(const AvgDown3dParams& p, cudaStream_t s) {
  const AvgDown3dDims d = check_avg_down3d(p, Device::CUDA);
  const int64_t n = d.to * d.ho * d.wo * d.co;
  if (n == 0) return;
  avg_down3d_kernel<<<blocks_for(n), kThreads, 0, s>>>(fp(p.x), fpm(p.y), d, p.factor_t, p.factor_s);
  MAGI2_CUDA_CHECK_LAUNCH("avg_down3d");
}

void spatial_attention(const SpatialAttentionParams& p, cudaStream_t s) {
  const auto dims = check_spatial_attention(p, Device::CUDA);
  const int64_t rows = dims[0], cols = dims[1], n = p.block_rows;
  MAGI2_CHECK(n <= kMaxBlockRows, "spatial_attention: blocks of ", n, " rows exceed the CUDA kernel's ",
              kMaxBlockRows);
  if (rows == 0) return;
  MAGI2_CHECK(rows < (int64_t{1} << 31), "spatial_attention: too many rows for one launch");
  const size_t smem = static_cast<size_t>(n) * sizeof(float);
  MAGI2_CUDA_CHECK(
      cudaFuncSetAttribute(spatial_attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  spatial_attention_kernel<<<static_cast<unsigned>(rows), kThreads, smem, s>>>(
      fp(p.q), p.q.row_stride(), fp(p.k), p.k.row_stride(), fp(p.v), p.v.row_stride(), fpm(p.o), p.o.row_stride(), n,
      cols, p.scale);
  MAGI2_CUDA_CHECK_LAUNCH("spatial_attention");
}

void channel_affine(const ChannelAffineParams& p, cudaStream_t s) {
  const auto dims = check_channel_affine(p, Device::CUDA);
  const int64_t rows = dims[0], cols = dims[1];
  if (rows * cols == 0) return;
  channel_affine_kernel<<<blocks_for(rows * cols), kThreads, 0, s>>>(fp(p.x), p.x.row_stride(), fp(p.shift),
                                                                     fp(p.mul), fpm(p.y), p.y.row_stride(), rows, cols);
  MAGI2_CUDA_CHECK_LAUNCH("channel_affine");
}

}  // namespace magi2::cuda
