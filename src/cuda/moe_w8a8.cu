// The W8A8 routed experts on the device (moe_w8a8.h, docs/fp8.md): the
// quantising gather, the bank transposition to K-major, the blockwise-scaled
// FP8 grouped GEMMs and the SwiGLU7 + quantise pass. The activation rounding
// is ops/numerics.h's (fp8_amax_step, fp8_act_scale, fp8_act_quant), the
// rule the CPU reference (cpu/moe_w8a8.cpp) applies, so the e4m3 rows and
// scales are bit-identical to the host's for identical inputs; the GEMMs
// differ from it in their fp32 summation order only (and G/U are rounded to
// bf16 before SwiGLU7, as on the W8A16 path).
#include "cuda/moe_w8a8.h"

#include <algorithm>

#include "core/error.h"
#include "cuda/cuda_common.h"
#include "cuda/device_fp.cuh"
#include "cuda/fp8_quant.cuh"
#include "ops/numerics.h"

namespace magi2::cuda {

namespace {

using namespace dev;

constexpr int kGroup = kFp8ActGroup;  // 128 = 32 lanes x 4 elements
constexpr int kWarps = 8;             // warps per block of the row kernels
constexpr int kTile = 64;             // transpose tile edge, bytes

// One warp per expert-ordered row p: xq[p] = e4m3 of r[token, head * dh ..]
// per 128-group, xs[p, g] its scales. Rows past offsets[F] are not routed.
__global__ void w8a8_gather_quant(const uint16_t* __restrict__ r, int64_t ldr, int mh, int64_t dh,
                                  const int32_t* __restrict__ src, const int32_t* __restrict__ offsets, int nf,
                                  int64_t max_rows, uint8_t* __restrict__ xq, float* __restrict__ xs) {
  const int64_t p = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (p >= max_rows || p >= offsets[nf]) return;
  const int64_t s = src[p], n = s / mh, h = s % mh;
  const uint16_t* from = r + n * ldr + h * dh;
  const int64_t groups = dh / kGroup;
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t c = g * kGroup + lane * 4;
    float v[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = bf16_to_f32(from[c + j]);
    const uint32_t w = fp8_quantize4(v, xs + p * groups + g, lane);
    *reinterpret_cast<uint32_t*>(xq + p * dh + c) = w;
  }
}

// SwiGLU7 + quantise, one warp per row, rows grid-strided: z = bf16(swiglu7(G,
// U)) from the W13 output h [R, 2 DE] bf16 (G then U), then e4m3 per 128-group
// written in place over the first DE bytes of the same row (zs its scales).
// In place is safe: group g's bytes overlap G columns [64 g, 64 g + 64), which
// the warp read in group g / 2 <= g, before the shuffle of group g; U is never
// overwritten. The sigmoid runs on the SFU (see moe_grouped.cu).
__global__ void w8a8_swiglu7_quant(uint16_t* __restrict__ h, int64_t de, const int32_t* __restrict__ offsets, int nf,
                                   int64_t max_rows, float* __restrict__ zs) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t rows = min(static_cast<int64_t>(offsets[nf]), max_rows);
  const int64_t groups = de / kGroup;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * kWarps + warp; p < rows;
       p += static_cast<int64_t>(gridDim.x) * kWarps) {
    uint16_t* row = h + p * 2 * de;
    uint8_t* zq = reinterpret_cast<uint8_t*>(row);
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t c = g * kGroup + lane * 4;
      float v[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        v[j] = round_bf16(swiglu7_f32(bf16_to_f32(row[c + j]), bf16_to_f32(row[de + c + j]),
                                      [](float x) { return sigmoid_fast_f32(x); }));
      }
      const uint32_t w = fp8_quantize4(v, zs + p * groups + g, lane);
      __syncwarp();
      *reinterpret_cast<uint32_t*>(zq + c) = w;
    }
  }
}

// out[f] = q[f]^T for each expert f with routed rows: q [F, rows, cols] e4m3
// -> out [F, cols, rows]. One 64 x 64 byte tile per block (256 threads, 16
// bytes each way); rows and cols are multiples of 64.
__global__ void transpose_expert_bank(const uint8_t* __restrict__ q, int64_t rows, int64_t cols,
                                      const int32_t* __restrict__ offsets, uint8_t* __restrict__ out) {
  const int64_t f = blockIdx.z;
  if (offsets[f + 1] == offsets[f]) return;
  __shared__ alignas(16) uint8_t tile[kTile][kTile + 16];
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kTile, c0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const uint8_t* qf = q + f * rows * cols;
  uint8_t* of = out + f * rows * cols;
  const int tr = threadIdx.x / 4, tc = (threadIdx.x % 4) * 16;
  *reinterpret_cast<uint4*>(&tile[tr][tc]) = *reinterpret_cast<const uint4*>(qf + (r0 + tr) * cols + c0 + tc);
  __syncthreads();
  // Thread (tr, tc) writes out row c0 + tr, columns r0 + tc .. + 15 = tile[tc .. tc + 15][tr].
  alignas(16) uint8_t v[16];
#pragma unroll
  for (int j = 0; j < 16; ++j) v[j] = tile[tc + j][tr];
  *reinterpret_cast<uint4*>(of + (c0 + tr) * rows + r0 + tc) = *reinterpret_cast<const uint4*>(v);
}

unsigned blocks_for(int64_t work, int threads) {
  const int64_t b = (work + threads - 1) / threads;
  MAGI2_CHECK(b < (int64_t{1} << 31), "moe_experts W8A8: too many rows for one launch (", work, ")");
  return static_cast<unsigned>(b > 0 ? b : 1);
}

}  // namespace

bool MoeW8a8::supports(int64_t dh, int64_t de) {
#if MAGI2_HAVE_CUTLASS
  return dh > 0 && de > 0 && dh % kFp8Block == 0 && de % kFp8Block == 0;
#else
  (void)dh, (void)de;
  return false;
#endif
}

MoeW8a8::MoeW8a8(int experts, int64_t max_rows, int64_t dh, int64_t de, LentBuffer rows, LentBuffer h,
                 const DeviceAlloc& alloc)
    : experts_(experts), max_rows_(max_rows), dh_(dh), de_(de) {
  MAGI2_CHECK(supports(dh, de), "moe_experts: --fp8-compute w8a8 on CUDA needs expert widths that are multiples of ",
              kFp8Block, " and CUTLASS (d_head ", dh, ", d_expert ", de, ")");
  const int64_t r = std::max<int64_t>(max_rows, 1);
  auto take = [&](LentBuffer lent, size_t bytes) {
    if (lent.ptr && lent.bytes >= bytes) return lent.ptr;
    owned_.push_back(alloc((bytes + 255) / 256 * 256));
    return owned_.back().get();
  };
  xq_ = static_cast<uint8_t*>(take(rows, static_cast<size_t>(r * dh)));
  xs_ = static_cast<float*>(take({}, static_cast<size_t>(r * (dh / kFp8Block)) * 4));
  h_ = static_cast<uint16_t*>(take(h, static_cast<size_t>(r * 2 * de) * 2));
  zs_ = static_cast<float*>(take({}, static_cast<size_t>(r * (de / kFp8Block)) * 4));
  bt_ = static_cast<uint8_t*>(take({}, static_cast<size_t>(2 * static_cast<int64_t>(experts) * dh * de)));
#if MAGI2_HAVE_CUTLASS
  w13_ = make_fp8_expert_gemm_bf16({.experts = experts, .parts = 2, .n = de, .k = dh, .lda = dh, .ldd = 2 * de},
                                   alloc);
  // Z's rows are the first DE bytes of each W13 output row: row stride 2 DE bf16 = 4 DE bytes.
  w2_ = make_fp8_expert_gemm_f32({.experts = experts, .parts = 1, .n = dh, .k = de, .lda = 4 * de, .ldd = dh},
                                 alloc);
#endif
}

MoeW8a8::~MoeW8a8() = default;

void MoeW8a8::run(const MoeExpertsParams& p, const int32_t* offsets, const int32_t* src, float* y, cudaStream_t s,
                  const std::function<void(int)>& mark) {
  const int mh = p.num_heads, nf = experts_;
  MAGI2_CHECK(p.r.size(1) / mh == dh_ && p.w_gate.size(2) == de_ && p.w_gate.size(0) == nf,
              "moe_experts W8A8: shapes differ from the planned ones");
  w8a8_gather_quant<<<blocks_for(max_rows_ * 32, 256), 256, 0, s>>>(
      static_cast<const uint16_t*>(p.r.data()), p.r.row_stride(), mh, dh_, src, offsets, nf, max_rows_, xq_, xs_);
  MAGI2_CUDA_CHECK_LAUNCH("moe_experts W8A8 gather");
  if (mark) mark(0);
  const int64_t bank = static_cast<int64_t>(nf) * dh_ * de_;
  auto transpose = [&](const Tensor& w, uint8_t* to) {
    const int64_t rows = w.size(1), cols = w.size(2);
    const dim3 grid(static_cast<unsigned>(cols / kTile), static_cast<unsigned>(rows / kTile),
                    static_cast<unsigned>(nf));
    transpose_expert_bank<<<grid, 256, 0, s>>>(static_cast<const uint8_t*>(w.data()), rows, cols, offsets, to);
    MAGI2_CUDA_CHECK_LAUNCH("moe_experts W8A8 bank transposition");
  };
  transpose(p.w_gate, bt_);
  transpose(p.w_up, bt_ + bank);
  const void* b13[2] = {bt_, bt_ + bank};
  const float* sb13[2] = {static_cast<const float*>(p.w_gate_scale.data()),
                          static_cast<const float*>(p.w_up_scale.data())};
  w13_->run(offsets, xq_, xs_, b13, sb13, h_, s);
  if (mark) mark(1);
  // Enough resident blocks to fill the GPU; each strides over the rows.
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((max_rows_ + kWarps - 1) / kWarps, 132 * 8));
  w8a8_swiglu7_quant<<<std::max(blocks, 1u), 32 * kWarps, 0, s>>>(h_, de_, offsets, nf, max_rows_, zs_);
  MAGI2_CUDA_CHECK_LAUNCH("moe_experts W8A8 swiglu7");
  if (mark) mark(2);
  // The W13 GEMM is done with the first transposed bank (same stream) before W_down overwrites it.
  transpose(p.w_down, bt_);
  const void* b2[1] = {bt_};
  const float* sb2[1] = {static_cast<const float*>(p.w_down_scale.data())};
  w2_->run(offsets, h_, zs_, b2, sb2, y, s);
  if (mark) mark(3);
}

}  // namespace magi2::cuda
