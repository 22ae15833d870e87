// FP8 routed-expert banks -> bf16 (moe_fp8_dequant.h).
//
// Speed: the conversion is the hardware's (cvt e4m3x2 -> f16x2, exact for
// every finite e4m3 value, subnormals included; f16 -> f32 exact), then one
// fp32 multiply by the block scale and cvt.rn.bf16x2 (the same RNE as
// f32_to_bf16 for every non-NaN value, subnormals included: no .ftz). A
// thread step is 8 consecutive elements (8 bytes in, 16 out) and a warp's
// lanes take consecutive steps, so every load and store of a warp is one
// contiguous run (partial-sector stores cost HBM read-modify-writes: a first
// version with 64 elements a thread ran ~5x slower); four steps in flight a
// thread. Index math: one 32-bit division a step (the flat row), the scale
// block from the row's and column's 128-blocks (rows % 128 == 0).
#include <algorithm>
#include <cstdint>

#include "core/error.h"
#include "cuda/cuda_common.h"
#include "cuda/device_fp.cuh"
#include "cuda/moe_fp8_dequant.h"
#include "ops/numerics.h"

namespace magi2::cuda {

namespace {

constexpr int kThreads = 1024;
constexpr int kMaxBanks = 3;

struct Banks {
  Fp8Bank b[kMaxBanks];
  // Bank i by constant indices: a dynamic index would copy the array to the stack.
  __device__ __forceinline__ Fp8Bank at(unsigned i) const { return i == 0 ? b[0] : i == 1 ? b[1] : b[2]; }
};

/// Four e4m3 bytes of w (byte 0 first) as exact fp32 values.
__device__ __forceinline__ void e4m3x4_to_f32(uint32_t w, float* f) {
  asm("{\n"
      " .reg .b16 l, h, a, b, c, d;\n"
      " .reg .b32 p, q;\n"
      " mov.b32 {l, h}, %4;\n"
      " cvt.rn.f16x2.e4m3x2 p, l;\n"
      " cvt.rn.f16x2.e4m3x2 q, h;\n"
      " mov.b32 {a, b}, p;\n"
      " mov.b32 {c, d}, q;\n"
      " cvt.f32.f16 %0, a;\n"
      " cvt.f32.f16 %1, b;\n"
      " cvt.f32.f16 %2, c;\n"
      " cvt.f32.f16 %3, d;\n"
      "}\n"
      : "=f"(f[0]), "=f"(f[1]), "=f"(f[2]), "=f"(f[3])
      : "r"(w));
}

/// 8 e4m3 values -> 8 bf16(q * sc) as one 16-byte word.
__device__ __forceinline__ uint4 dequant8(const uint2& in, float sc) {
  float f[8];
  e4m3x4_to_f32(in.x, f);
  e4m3x4_to_f32(in.y, f + 4);
  return make_uint4(dev::bf16x2_rn(f[1] * sc, f[0] * sc), dev::bf16x2_rn(f[3] * sc, f[2] * sc),
                    dev::bf16x2_rn(f[5] * sc, f[4] * sc), dev::bf16x2_rn(f[7] * sc, f[6] * sc));
}

// Streaming accesses: the pass touches 9 GB a layer at the release width and
// runs beside the attention core, whose L2 working set it should not evict.
__device__ __forceinline__ uint2 load_stream(const uint2* p) { return __ldcs(p); }
__device__ __forceinline__ void store_stream(uint4* p, const uint4& v) { __stcs(p, v); }

constexpr int kStep = 8;     // elements a thread step
constexpr int kInFlight = 4;  // steps a thread loads before it converts

// Grid (blocks, banks): threads stride over the bank's 8-element steps (flat: expert, row, column).
__global__ void __launch_bounds__(kThreads) fp8_dequant_kernel(Banks banks, uint32_t nf,
                                                               const int32_t* __restrict__ offsets) {
  const Fp8Bank bk = banks.at(blockIdx.y);
  const uint32_t rows = static_cast<uint32_t>(bk.rows), cols = static_cast<uint32_t>(bk.cols);
  const uint32_t steps = nf * rows * (cols / kStep), bcols = cols / kFp8Block;
  const uint32_t stride = gridDim.x * blockDim.x;
  const uint2* __restrict__ q = reinterpret_cast<const uint2*>(bk.q);
  uint4* __restrict__ out = reinterpret_cast<uint4*>(bk.out);
  for (uint32_t k0 = blockIdx.x * blockDim.x + threadIdx.x; k0 < steps; k0 += kInFlight * stride) {
    uint2 in[kInFlight];
#pragma unroll
    for (int i = 0; i < kInFlight; ++i) {
      const uint32_t k = k0 + i * stride;
      if (k < steps) in[i] = load_stream(q + k);
    }
#pragma unroll
    for (int i = 0; i < kInFlight; ++i) {
      const uint32_t k = k0 + i * stride;
      if (k >= steps) break;
      const uint32_t e = k * kStep, row = e / cols, c = e - row * cols;  // row: flat over experts
      if (offsets != nullptr) {
        const uint32_t f = row / rows;
        if (offsets[f + 1] == offsets[f]) continue;
      }
      store_stream(out + k, dequant8(in[i], bk.scale[(row / kFp8Block) * bcols + c / kFp8Block]));
    }
  }
}

// Any widths (the tiny test models): one element a thread step with the
// numerics header's own conversion, the CPU's bytes (NaN included).
__global__ void __launch_bounds__(kThreads) fp8_dequant_any_kernel(Banks banks, int64_t nf,
                                                                   const int32_t* __restrict__ offsets) {
  const Fp8Bank bk = banks.at(blockIdx.y);
  const int64_t per = bk.rows * bk.cols, n = nf * per;
  const int64_t brows = (bk.rows + kFp8Block - 1) / kFp8Block, bcols = (bk.cols + kFp8Block - 1) / kFp8Block;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t f = e / per, w = e % per, r = w / bk.cols, c = w % bk.cols;
    if (offsets != nullptr && offsets[f + 1] == offsets[f]) continue;
    const float sc = bk.scale[(f * brows + r / kFp8Block) * bcols + c / kFp8Block];
    bk.out[e] = dev::f32_to_bf16(fp8_dequant_f32(bk.q[e], sc));
  }
}

// The fast kernel's widths: rows and columns multiples of 128 (a row's scale
// blocks follow from its flat index), 32-bit element indices, 16-byte aligned banks.
bool fast_fits(const Fp8Bank& b, int64_t nf) {
  return b.rows % kFp8Block == 0 && b.cols % kFp8Block == 0 && nf * b.rows * b.cols < (int64_t{1} << 32) &&
         reinterpret_cast<uintptr_t>(b.q) % 16 == 0 && reinterpret_cast<uintptr_t>(b.out) % 16 == 0;
}

}  // namespace

void fp8_dequant_banks(const Fp8Bank* banks, int nbanks, int64_t nf, const int32_t* offsets,
                       unsigned blocks_per_bank, cudaStream_t s) {
  MAGI2_CHECK(nbanks >= 1 && nbanks <= kMaxBanks, "fp8_dequant_banks: 1 to ", kMaxBanks, " banks, got ", nbanks);
  Banks all{};
  int64_t units = 0;
  bool fast = true;
  for (int i = 0; i < nbanks; ++i) {
    const Fp8Bank& b = banks[i];
    MAGI2_CHECK(nf >= 1 && b.rows >= 1 && b.cols >= 1 && b.q != nullptr && b.scale != nullptr && b.out != nullptr,
                "fp8_dequant_banks: bank ", i, " is empty or missing");
    all.b[i] = b;
    fast = fast && fast_fits(b, nf);
    units = std::max(units, nf * b.rows * b.cols);
  }
  if (fast) units /= kStep * kInFlight;
  const int64_t need = (units + kThreads - 1) / kThreads;
  static const int sms = [] {
    int dev = 0, n = 0;
    MAGI2_CUDA_CHECK(cudaGetDevice(&dev));
    MAGI2_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
    return n;
  }();
  const int64_t fill = 2 * static_cast<int64_t>(sms);  // two blocks an SM per bank; each thread strides on
  const int64_t cap = blocks_per_bank > 0 ? blocks_per_bank : fill;
  const unsigned grid = static_cast<unsigned>(std::max<int64_t>(1, std::min(need, cap)));
  const dim3 blocks(grid, static_cast<unsigned>(nbanks));
  if (fast)
    fp8_dequant_kernel<<<blocks, kThreads, 0, s>>>(all, static_cast<uint32_t>(nf), offsets);
  else
    fp8_dequant_any_kernel<<<blocks, kThreads, 0, s>>>(all, nf, offsets);
  MAGI2_CUDA_CHECK_LAUNCH("moe_experts FP8 dequantisation");
}

}  // namespace magi2::cuda
