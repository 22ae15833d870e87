// The W8A8 routed experts on the device (moe_w8a8.h, docs/fp8.md): the
// quantising gather and the bank transpositions to K-major, then the fused
// kernel. The activation rounding is ops/numerics.h's (fp8_amax_step,
// fp8_act_scale, fp8_act_quant), the rule the CPU reference (cpu/moe_w8a8.cpp)
// applies, so the e4m3 rows and scales are bit-identical to the host's for
// identical inputs.
#include "cuda/moe_w8a8.h"

#include <algorithm>

#include "core/error.h"
#include "cuda/cuda_common.h"
#include "cuda/device_fp.cuh"
#include "cuda/fp8_fragment.cuh"
#include "cuda/fp8_quant.cuh"
#include "cuda/moe_expert_fused.h"
#include "ops/backend_options.h"
#include "ops/numerics.h"

namespace magi2::cuda {

namespace {

using namespace dev;

constexpr int kGroup = kFp8ActGroup;  // 128 = 32 lanes x 4 elements
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

// out[f] = q[f]^T for each expert f: q [F, rows, cols] e4m3 -> out [F, cols,
// rows]. One 64 x 64 byte tile per block (256 threads, 16 bytes each way);
// rows and cols are multiples of 64. kVtOrder (W_down): each
// 32 columns of an out row in fp8_vt_key's order, the k order of the fused
// kernel's Z fragment (fp8_vt_key keeps a position within its 16).
template <bool kVtOrder>
__global__ void transpose_expert_bank(const uint8_t* __restrict__ q, int64_t rows, int64_t cols,
                                      uint8_t* __restrict__ out) {
  const int64_t f = blockIdx.z;
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
  for (int j = 0; j < 16; ++j) v[j] = tile[kVtOrder ? fp8_vt_key(tc + j) : tc + j][tr];
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
  return moe_fused_fp8_expert_widths(dh, de);
#else
  (void)dh, (void)de;
  return false;
#endif
}

void w8a8_banks_to_k_major(const MoeExpertsParams& p, uint8_t* gate_t, uint8_t* up_t, uint8_t* down_t,
                           cudaStream_t s) {
  const int64_t nf = p.w_gate.size(0);
  auto transpose = [&](const Tensor& w, uint8_t* to, bool vt_order) {
    const int64_t rows = w.size(1), cols = w.size(2);
    MAGI2_CHECK(rows % kTile == 0 && cols % kTile == 0, "moe_experts W8A8: bank widths ", rows, " x ", cols,
                " are not multiples of ", kTile);
    const dim3 grid(static_cast<unsigned>(cols / kTile), static_cast<unsigned>(rows / kTile),
                    static_cast<unsigned>(nf));
    auto* kernel = vt_order ? transpose_expert_bank<true> : transpose_expert_bank<false>;
    kernel<<<grid, 256, 0, s>>>(static_cast<const uint8_t*>(w.data()), rows, cols, to);
    MAGI2_CUDA_CHECK_LAUNCH("moe_experts W8A8 bank transposition");
  };
  transpose(p.w_gate, gate_t, false);
  transpose(p.w_up, up_t, false);
  transpose(p.w_down, down_t, true);
}

MoeW8a8::MoeW8a8(int experts, int64_t max_rows, int64_t dh, int64_t de, const DeviceAlloc& alloc)
    : experts_(experts), max_rows_(max_rows), dh_(dh), de_(de), alloc_(alloc) {
  MAGI2_CHECK(supports(dh, de), "moe_experts: --fp8-compute w8a8 on CUDA needs d_head 256, d_expert a multiple of ",
              kFp8Block, " up to 8192 and CUTLASS (d_head ", dh, ", d_expert ", de, ")");
  const int64_t r = std::max<int64_t>(max_rows, 1);
  xq_ = static_cast<uint8_t*>(take(static_cast<size_t>(r * dh)));
  xs_ = static_cast<float*>(take(static_cast<size_t>(r * (dh / kFp8Block)) * 4));
}

MoeW8a8::~MoeW8a8() = default;

void* MoeW8a8::take(size_t bytes) {
  owned_.push_back(alloc_((bytes + 255) / 256 * 256));
  return owned_.back().get();
}

void MoeW8a8::transpose_banks(const MoeExpertsParams& p, cudaStream_t s) {
  const int nf = experts_;
  MAGI2_CHECK(p.bank_layout == ExpertBankLayout::Checkpoint && p.r.size(1) / p.num_heads == dh_ &&
                  p.w_gate.size(2) == de_ && p.w_gate.size(0) == nf,
              "moe_experts W8A8: shapes differ from the planned ones");
  if (bt_ == nullptr) {
    check_not_capturing(s, "moe_experts: no W8A8 bank scratch planned; run one eager forward before capturing a "
                        "CUDA graph");
    bt_ = static_cast<uint8_t*>(take(static_cast<size_t>(3 * static_cast<int64_t>(nf) * dh_ * de_)));
  }
  const int64_t bank = static_cast<int64_t>(nf) * dh_ * de_;
  w8a8_banks_to_k_major(p, bt_, bt_ + bank, bt_ + 2 * bank, s);
}

void MoeW8a8::run(const MoeExpertsParams& p, const int32_t* offsets, const int32_t* src, const float* wrow,
                  uint16_t* y, int32_t* tile_start, cudaStream_t s, const std::function<void(int)>& mark) {
  const int mh = p.num_heads, nf = experts_;
  const bool k_major = p.bank_layout == ExpertBankLayout::KMajorW8a8;
  MAGI2_CHECK(p.r.size(1) / mh == dh_ && moe_expert_width(p) == de_ && p.w_gate.size(0) == nf,
              "moe_experts W8A8: shapes differ from the planned ones");
  MAGI2_CHECK(k_major || bt_ != nullptr, "moe_experts W8A8: checkpoint-layout banks reached run() before "
              "transpose_banks");
  w8a8_gather_quant<<<blocks_for(max_rows_ * 32, 256), 256, 0, s>>>(
      static_cast<const uint16_t*>(p.r.data()), p.r.row_stride(), mh, dh_, src, offsets, nf, max_rows_, xq_, xs_);
  MAGI2_CUDA_CHECK_LAUNCH("moe_experts W8A8 gather");
  if (mark) mark(0);
  const int64_t bank = static_cast<int64_t>(nf) * dh_ * de_;
  const auto* gate_t = k_major ? static_cast<const uint8_t*>(p.w_gate.data()) : bt_;
  const auto* up_t = k_major ? static_cast<const uint8_t*>(p.w_up.data()) : bt_ + bank;
  const auto* down_t = k_major ? static_cast<const uint8_t*>(p.w_down.data()) : bt_ + 2 * bank;
#if MAGI2_HAVE_CUTLASS
  moe_expert_fused_fp8({.xq = xq_, .xs = xs_, .dh = dh_, .de = de_, .offsets = offsets, .nf = nf,
                        .max_rows = max_rows_, .gate_t = gate_t, .up_t = up_t, .down_t = down_t,
                        .gate_scale = static_cast<const float*>(p.w_gate_scale.data()),
                        .up_scale = static_cast<const float*>(p.w_up_scale.data()),
                        .down_scale = static_cast<const float*>(p.w_down_scale.data()), .wrow = wrow, .y = y,
                        .tile_start = tile_start},
                       s);
#else
  (void)wrow, (void)y, (void)tile_start, (void)gate_t, (void)up_t, (void)down_t;
#endif
  if (mark)
    for (int i = 1; i <= 3; ++i) mark(i);  // one kernel for W13, SwiGLU7 and W2
}

}  // namespace magi2::cuda
