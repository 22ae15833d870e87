// The W8A8 routed experts on the device (moe_w8a8.h, docs/fp8.md): the
// quantising scatter and the bank transpositions to K-major, then the fused
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

// One warp per (token n, head h) of the pass: its d_head = 256 values, 8 a
// lane (lanes 0-15 group 0, lanes 16-31 group 1), quantised once per 1 x 128
// group, then stored to the expert-ordered row of each of its k routes: pos
// [MH, T, k] from the route sort, -1 for a route to no valid expert (the
// combine's map). Every row below offsets[F] is one route's, so each is written
// once; rows past it are not routed. Quantising per (token, head) rather than
// per routed row does a sixth of the rounding work and reads the input once.
// vec: 16-byte loads (aligned rows), else 2-byte ones.
constexpr int kScatterDh = 256;  // MoeW8a8::supports: moe_fused_fp8_expert_widths takes d_head 256 only
__global__ void w8a8_quant_scatter(const uint16_t* __restrict__ r, int64_t ldr, int64_t t, int mh, int k,
                                   const int32_t* __restrict__ pos, bool vec, uint8_t* __restrict__ xq,
                                   float* __restrict__ xs) {
  const int64_t pair = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (pair >= t * mh) return;
  const int64_t n = pair / mh, h = pair % mh;
  const uint16_t* from = r + n * ldr + h * kScatterDh + lane * 8;
  uint16_t b[8];
  if (vec) {
    const uint4 raw = *reinterpret_cast<const uint4*>(from);
    const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) b[2 * j] = static_cast<uint16_t>(w[j] & 0xffffu), b[2 * j + 1] = w[j] >> 16;
  } else {
#pragma unroll
    for (int j = 0; j < 8; ++j) b[j] = from[j];
  }
  float v[8], m = 0.f;
#pragma unroll
  for (int j = 0; j < 8; ++j) v[j] = bf16_to_f32(b[j]), m = fp8_amax_step(m, v[j]);
#pragma unroll
  for (int o = 8; o > 0; o >>= 1) m = fp8_amax_step(m, __shfl_xor_sync(0xffffffffu, m, o));  // within 16 lanes
  const float sc = fp8_act_scale(m), rcp = fp8_act_rcp(sc);
  // fp8_act_quant's bytes by the multiplying form (one conversion a pair; fp8_quant.cuh).
  const uint32_t q[2] = {dev::fp8_quant4(v, sc, rcp), dev::fp8_quant4(v + 4, sc, rcp)};
  const int32_t mine = lane < k ? pos[(h * t + n) * k + lane] : -1;
  for (int j = 0; j < k; ++j) {
    const int64_t p = __shfl_sync(0xffffffffu, mine, j);
    if (p < 0) continue;
    *reinterpret_cast<uint2*>(xq + p * kScatterDh + lane * 8) = make_uint2(q[0], q[1]);
    if ((lane & 15) == 0) xs[p * (kScatterDh / kGroup) + lane / 16] = sc;
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

void MoeW8a8::run(const MoeExpertsParams& p, const int32_t* offsets, const int32_t* pos, const float* wrow,
                  uint16_t* y, int32_t* tile_start, cudaStream_t s, const std::function<void(int)>& mark) {
  const int mh = p.num_heads, nf = experts_;
  const bool k_major = p.bank_layout == ExpertBankLayout::KMajorW8a8;
  MAGI2_CHECK(p.r.size(1) / mh == dh_ && moe_expert_width(p) == de_ && p.w_gate.size(0) == nf,
              "moe_experts W8A8: shapes differ from the planned ones");
  MAGI2_CHECK(k_major || bt_ != nullptr, "moe_experts W8A8: checkpoint-layout banks reached run() before "
              "transpose_banks");
  const int64_t t = p.r.size(0);
  const auto* r = static_cast<const uint16_t*>(p.r.data());
  const bool vec = reinterpret_cast<uintptr_t>(r) % 16 == 0 && p.r.row_stride() % 8 == 0;
  w8a8_quant_scatter<<<blocks_for(t * mh * 32, 256), 256, 0, s>>>(r, p.r.row_stride(), t, mh, p.top_k, pos, vec, xq_,
                                                                  xs_);
  MAGI2_CUDA_CHECK_LAUNCH("moe_experts W8A8 quantising scatter");
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
