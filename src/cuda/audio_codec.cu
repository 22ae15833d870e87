// The Stable Audio Open (Oobleck) decoder's ops on the CUDA backend
// (codec_ops.h): conv1d, conv_transpose1d and SnakeBeta over channels-last
// [L, C] f32 activations. Both convolutions run one kernel: an output row m of
// a launch reads input row src0 + m*src_m + q*src_q at its q-th tap (tap
// index tap0 + q*tap_step), which is a plain conv1d (one launch) or one phase
// of the transposed conv (one launch per phase). Every output sums (tap,
// input channel) in ascending order in fp32 from zero, taps outside the input
// multiplying zeros as the CPU's tile does, then adds the bias and the
// residual: the CPU backend's bytes.
#include <cstdint>

#include "cuda/codec_ops.h"
#include "cuda/cuda_common.h"
#include "cuda/device_fp.cuh"
#include "ops/codec_checks.h"
#include "ops/codec_numerics.h"

namespace magi2::cuda {

namespace {

constexpr int kCo = 64;          // output channels per block (threadIdx.x)
constexpr int kRowGroups = 4;    // threadIdx.y
constexpr int kRowsPerThread = 8;
constexpr int kRows = kRowGroups * kRowsPerThread;  // output rows per block
constexpr int kChunk = 32;       // input channels staged in shared memory at a time

// One launch of the shared 1-D convolution kernel (see the file comment).
struct Conv1dLaunch {
  const float* x;         // [lin, cin]
  const float* w;         // [K, cin, cout]
  const float* bias;      // [cout] or null
  const float* residual;  // [*, cout] or null (indexed by the y row)
  float* y;               // [*, cout]
  int64_t lin, cin, cout;
  int64_t rows;                   // output rows m = 0 .. rows-1 of this launch
  int64_t out0, out_step;         // y row of m: out0 + m*out_step
  int64_t src0, src_m, src_q;     // x row of (m, q): src0 + m*src_m + q*src_q (zeros outside [0, lin))
  int64_t tap0, tap_step, ntaps;  // w tap of q: tap0 + q*tap_step, q < ntaps
};

__global__ void __launch_bounds__(kCo* kRowGroups) conv1d_kernel(Conv1dLaunch a) {
  __shared__ float xs[kRows][kChunk + 1];
  const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * kCo + tx;
  const int64_t m_block = static_cast<int64_t>(blockIdx.x) * kRows;
  const int64_t o = static_cast<int64_t>(blockIdx.y) * kCo + tx;
  const bool has_o = o < a.cout;
  float acc[kRowsPerThread];
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) acc[r] = 0.f;
  for (int64_t q = 0; q < a.ntaps; ++q) {
    const float* wq = a.w + (a.tap0 + q * a.tap_step) * a.cin * a.cout + (has_o ? o : 0);
    for (int64_t i0 = 0; i0 < a.cin; i0 += kChunk) {
      const int64_t n = a.cin - i0 < kChunk ? a.cin - i0 : kChunk;
      __syncthreads();  // the previous chunk has been read
      for (int e = tid; e < kRows * kChunk; e += kCo * kRowGroups) {
        const int r = e / kChunk, i = e % kChunk;
        const int64_t src = a.src0 + (m_block + r) * a.src_m + q * a.src_q;
        xs[r][i] = (i < n && src >= 0 && src < a.lin) ? a.x[src * a.cin + i0 + i] : 0.f;
      }
      __syncthreads();
      for (int64_t i = 0; i < n; ++i) {
        const float wv = wq[(i0 + i) * a.cout];
#pragma unroll
        for (int r = 0; r < kRowsPerThread; ++r) acc[r] += xs[ty * kRowsPerThread + r][i] * wv;
      }
    }
  }
  if (!has_o) return;
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) {
    const int64_t m = m_block + ty * kRowsPerThread + r;
    if (m >= a.rows) break;
    const int64_t row = a.out0 + m * a.out_step;
    float v = acc[r];
    if (a.bias) v += a.bias[o];
    if (a.residual) v += a.residual[row * a.cout + o];
    a.y[row * a.cout + o] = v;
  }
}

void launch_conv1d(const Conv1dLaunch& a, cudaStream_t s, const char* op) {
  if (a.rows <= 0 || a.cout <= 0) return;
  const int64_t row_blocks = (a.rows + kRows - 1) / kRows, co_blocks = (a.cout + kCo - 1) / kCo;
  MAGI2_CHECK(row_blocks < (int64_t{1} << 31) && co_blocks < 65536, op, ": too large for one launch");
  const dim3 grid(static_cast<unsigned>(row_blocks), static_cast<unsigned>(co_blocks));
  conv1d_kernel<<<grid, dim3(kCo, kRowGroups), 0, s>>>(a);
  MAGI2_CUDA_CHECK_LAUNCH(op);
}

const float* fptr(const Tensor& t) { return t.defined() ? static_cast<const float*>(t.data()) : nullptr; }

// One thread per element; the per-channel factors are recomputed (two exps) rather than staged.
__global__ void snake_beta_kernel(const float* x, const float* __restrict__ alpha, const float* __restrict__ beta,
                                  float* y, int64_t rows, int64_t cols, bool logscale) {
  const int64_t n = rows * cols;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c = e % cols;
    y[e] = snake_beta_element(x[e], snake_alpha(alpha[c], logscale), snake_inv_beta(beta[c], logscale));
  }
}

}  // namespace

void conv1d(const Conv1dParams& p, cudaStream_t s) {
  const Conv1dDims d = check_conv1d(p, Device::CUDA);
  launch_conv1d({.x = fptr(p.x), .w = fptr(p.w), .bias = fptr(p.bias), .residual = fptr(p.residual),
                 .y = static_cast<float*>(p.y.data()), .lin = d.lin, .cin = d.cin, .cout = d.cout, .rows = d.lout,
                 .out0 = 0, .out_step = 1, .src0 = -p.padding, .src_m = p.stride, .src_q = p.dilation, .tap0 = 0,
                 .tap_step = 1, .ntaps = d.taps},
                s, "conv1d");
}

void conv_transpose1d(const ConvTranspose1dParams& p, cudaStream_t s) {
  const Conv1dDims d = check_conv_transpose1d(p, Device::CUDA);
  const int64_t st = p.stride, pad = p.padding;
  // Output rows t of phase ph = (t + pad) mod st are first + m*st; they use taps
  // k = ph, ph + st, ... (ascending, as the CPU) and input row (t + pad - k) / st
  // = (first + pad - ph) / st + m - q, exact since first + pad = ph (mod st).
  for (int64_t ph = 0; ph < st; ++ph) {
    const int64_t first = ((ph - pad) % st + st) % st;
    const int64_t count = first < d.lout ? (d.lout - 1 - first) / st + 1 : 0;
    const int64_t ntaps = ph < d.taps ? (d.taps - 1 - ph) / st + 1 : 0;
    launch_conv1d({.x = fptr(p.x), .w = fptr(p.w), .bias = fptr(p.bias), .residual = nullptr,
                   .y = static_cast<float*>(p.y.data()), .lin = d.lin, .cin = d.cin, .cout = d.cout, .rows = count,
                   .out0 = first, .out_step = st, .src0 = (first + pad - ph) / st, .src_m = 1, .src_q = -1,
                   .tap0 = ph, .tap_step = st, .ntaps = ntaps},
                  s, "conv_transpose1d");
  }
}

void snake_beta(const SnakeBetaParams& p, cudaStream_t s) {
  const auto dims = check_snake_beta(p, Device::CUDA);
  const int64_t n = dims[0] * dims[1];
  if (n == 0) return;
  const int64_t blocks = (n + 255) / 256;
  snake_beta_kernel<<<static_cast<unsigned>(blocks < 65536 ? blocks : 65536), 256, 0, s>>>(
      fptr(p.x), fptr(p.alpha), fptr(p.beta), static_cast<float*>(p.y.data()), dims[0], dims[1], p.logscale);
  MAGI2_CUDA_CHECK_LAUNCH("snake_beta");
}

}  // namespace magi2::cuda
