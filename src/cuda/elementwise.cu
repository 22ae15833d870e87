// Element-wise and row-norm kernels of the CUDA backend: RMSNorm (spec
// magi2-dit.md §4.1), SwiGLU7 (§4.3), the attention output gate (§6 step 9),
// add, cast, and the f32 bias epilogue. Each matches the CPU reference
// (src/cpu/) bit for bit: the same fp32 operations in the same order, no FMA
// contraction (built with --fmad=false), IEEE division and square root, and
// the exponential with glibc expf's bits (device_fp.cuh exp_f32).
#include <cstdint>

#include "cuda/cuda_common.h"
#include "cuda/device_fp.cuh"
#include "cuda/fp8_quant.cuh"
#include "cuda/row_norm.cuh"
#include "cuda/linear_fp8.h"
#include "ops/numerics.h"
#include "ops/op_checks.h"

namespace magi2::cuda {

namespace {

constexpr int kThreads = 256;

using dev::bf16_to_f32;
using dev::exp_f32;
using dev::f32_to_bf16;
using dev::round_bf16;
using dev::sigmoid_f32;

__device__ __forceinline__ float load_f32(const float* p) { return *p; }
__device__ __forceinline__ float load_f32(const uint16_t* p) { return bf16_to_f32(*p); }
__device__ __forceinline__ void store_f32(float* p, float v) { *p = v; }
__device__ __forceinline__ void store_f32(uint16_t* p, float v) { *p = f32_to_bf16(v); }


// One 16-lane group per d-vector. Lane j keeps the partial sum of elements
// j, j+16, j+32, ... in increasing order and the 16 sums meet in the halving
// tree 8, 4, 2, 1: exactly the CPU's dot_f32 order, so the mean square (and
// with it every output) is bit-identical.
template <typename TI, typename TO>
__global__ void rms_norm_kernel(const TI* __restrict__ x, int64_t ldx, TO* __restrict__ y, int64_t ldy,
                                const float* __restrict__ w, int64_t rows, int64_t heads, int64_t d,
                                int4 cu, int groups, float eps) {
  const int64_t vec = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 16;
  const int lane = threadIdx.x & 15;
  if (vec >= rows * heads) return;  // whole 16-lane groups leave together
  const int64_t r = vec / heads, h = vec % heads;
  const TI* xv = x + r * ldx + h * d;
  TO* yv = y + r * ldy + h * d;
  float acc = 0.f;
  for (int64_t i = lane; i < d; i += 16) {
    const float v = load_f32(xv + i);
    acc += v * v;
  }
  const unsigned mask = (threadIdx.x & 16) ? 0xffff0000u : 0x0000ffffu;
  for (int off = 8; off >= 1; off /= 2) acc += __shfl_down_sync(mask, acc, off, 16);
  acc = __shfl_sync(mask, acc, 0, 16);
  const float ms = acc * (1.0f / static_cast<float>(d));
  const float rs = 1.0f / sqrtf(ms + eps);
  int m = 0;
  while (m + 1 < groups && r >= (m == 0 ? cu.y : cu.z)) ++m;
  const float* wm = w + m * d;
  for (int64_t i = lane; i < d; i += 16) store_f32(yv + i, (load_f32(xv + i) * rs) * (wm[i] + 1.0f));
}

__global__ void swiglu7_kernel(const uint16_t* __restrict__ u, int64_t ldu, uint16_t* __restrict__ z, int64_t ldz,
                               int64_t rows, int64_t half) {
  const int64_t n = rows * half;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = e / half, i = e % half;
    const float g = bf16_to_f32(u[r * ldu + 2 * i]), l = bf16_to_f32(u[r * ldu + 2 * i + 1]);
    z[r * ldz + i] = f32_to_bf16(swiglu7_f32(g, l, [](float x) { return sigmoid_f32(x); }));
  }
}

__global__ void gate_kernel(uint16_t* __restrict__ o, const uint16_t* __restrict__ g, int64_t ldg, int64_t t,
                            int64_t h, int64_t hd) {
  const int64_t n = t * h * hd;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = e / (h * hd), k = (e / hd) % h;
    const float s = round_bf16(sigmoid_f32(bf16_to_f32(g[row * ldg + k])));
    o[e] = f32_to_bf16(bf16_to_f32(o[e]) * s);
  }
}

// Vector forms for bf16 rows whose starts are 16-byte aligned (widths and row
// strides multiples of 8): 8 elements a thread by 16-byte loads and stores,
// the (row, 8-column) index from one 32-bit division. The same fp32 operations
// per element as the scalar kernels, so the same bytes.
using dev::bf16x8_pack;
using dev::bf16x8_unpack;

// kQ8 (SwiGLU7Params::z8, half a multiple of 128): a half-warp's 16 threads
// hold one row's 1 x 128 group (a warp's indices are 32 consecutive ones and a
// row holds a whole number of groups), quantised from the bf16 values stored:
// z8q (row stride ldq) e4m3, z8s (row stride lds) f32. kFast: the sigmoid on
// the SFU (dev::sigmoid_fast_f32), else the CPU's glibc-exact one: the exact
// exp's table walk made this kernel bound by its instructions, not by DRAM
// (Nsight Compute, H100: SM 80-84 %, DRAM 44-71 %; docs/perf.md).
template <bool kQ8 = false, bool kFast = false>
__global__ void swiglu7_vec_kernel(const uint16_t* __restrict__ u, int64_t ldu, uint16_t* __restrict__ z,
                                   int64_t ldz, uint32_t rows, uint32_t half8, uint8_t* __restrict__ z8q = nullptr,
                                   int64_t ldq = 0, float* __restrict__ z8s = nullptr, int64_t lds = 0) {
  // exp_f32's table in shared memory: a warp's 32 exponentials read up to 32
  // different entries, which the __constant__ copy would serialise.
  __shared__ uint64_t table[32];
  if constexpr (!kFast) {
    dev::exp2_table_to_shared(table);
    __syncthreads();
  }
  const uint64_t* tab = table;
  auto sig = [tab](float x) {
    if constexpr (kFast)
      return dev::sigmoid_fast_f32(x);
    else
      return sigmoid_f32(x, tab);
  };
  const uint32_t n = rows * half8;
  for (uint32_t v = blockIdx.x * blockDim.x + threadIdx.x; v < n; v += gridDim.x * blockDim.x) {
    const uint32_t r = v / half8, c = v - r * half8;
    const uint4* src = reinterpret_cast<const uint4*>(u + r * ldu) + 2 * c;  // 8 (gate, up) pairs
    float a[8], b[8], o[8];
    bf16x8_unpack(src[0], a);
    bf16x8_unpack(src[1], b);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      o[i] = swiglu7_f32(a[2 * i], a[2 * i + 1], sig);
      o[4 + i] = swiglu7_f32(b[2 * i], b[2 * i + 1], sig);
    }
    reinterpret_cast<uint4*>(z + r * ldz)[c] = bf16x8_pack(o);
    if constexpr (kQ8) {
#pragma unroll
      for (int i = 0; i < 8; ++i) o[i] = round_bf16(o[i]);
      dev::fp8_quantize8_half(o, z8q + r * ldq + 8 * c, z8s + r * lds + c / 16, threadIdx.x & 15,
                              (threadIdx.x & 16) ? 0xffff0000u : 0x0000ffffu);
    }
  }
}

// One warp per row for bf16 rows whose starts are 16-byte aligned (d % 8 ==
// 0): the row goes through shared memory once (16-byte loads), where lane j
// (and its twin j + 16) sums the squares of elements j, j + 16, ... in
// increasing order, as rms_norm_kernel's lane j does, and the 16 sums meet in
// the same tree 8, 4, 2, 1: the same bytes. The output pass reads the row back
// from shared memory with 16-byte accesses and writes 8 elements a lane.
constexpr int kRowWarps = 4;  // rows per block of rms_norm_row_kernel

// kQ8 (bf16 y, d a multiple of 128; RmsNormParams::y8): each iteration's 8
// elements a lane are one 16-lane half of two 1 x 128 groups, so a half-warp
// quantises its group from the bf16 values it stores (y8q [rows, d] e4m3,
// y8s [rows, d / 128] f32): the bytes quantize_rows_fp8 of y would give.
template <typename TO, bool kQ8 = false>
__global__ void __launch_bounds__(kRowWarps * 32)
    rms_norm_row_kernel(const uint16_t* __restrict__ x, int64_t ldx, TO* __restrict__ y, int64_t ldy,
                        const float* __restrict__ w, int64_t rows, int d, int4 cu, int groups, float eps,
                        uint8_t* __restrict__ y8q = nullptr, float* __restrict__ y8s = nullptr) {
  extern __shared__ uint4 row_buf[];
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) & 31;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowWarps + warp;
  if (r >= rows) return;  // whole warps leave together
  const int n8 = d / 8;
  uint4* sx = row_buf + static_cast<int64_t>(warp) * n8;
  const uint4* xv = reinterpret_cast<const uint4*>(x + r * ldx);
  int c = lane;
  for (; c + 96 < n8; c += 128) {  // four 16-byte loads in flight a lane
    const uint4 a = xv[c], b = xv[c + 32], e = xv[c + 64], f = xv[c + 96];
    sx[c] = a, sx[c + 32] = b, sx[c + 64] = e, sx[c + 96] = f;
  }
  for (; c < n8; c += 32) sx[c] = xv[c];
  __syncwarp();
  const float* wm = w + static_cast<int64_t>(dev::group_of(cu, groups, r)) * d;
  if constexpr (kQ8)
    dev::rms_norm_row_shared<TO, true>(sx, d, lane, wm, eps, y + r * ldy, y8q + r * d, y8s + r * (d / kFp8ActGroup));
  else
    dev::rms_norm_row_shared<TO>(sx, d, lane, wm, eps, y + r * ldy);
}

// kC (AddParams::c): out = bf16(a + bf16(b + c)).
template <bool kC = false>
__global__ void add_vec_kernel(const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, uint16_t* out,
                               int64_t ldo, uint32_t rows, uint32_t cols8, const uint16_t* c3 = nullptr,
                               int64_t ldc = 0) {
  const uint32_t n = rows * cols8;
  for (uint32_t v = blockIdx.x * blockDim.x + threadIdx.x; v < n; v += gridDim.x * blockDim.x) {
    const uint32_t r = v / cols8, c = v - r * cols8;
    float x[8], y[8];
    bf16x8_unpack(reinterpret_cast<const uint4*>(a + r * lda)[c], x);
    bf16x8_unpack(reinterpret_cast<const uint4*>(b + r * ldb)[c], y);
    if constexpr (kC) {
      float z[8];
      bf16x8_unpack(reinterpret_cast<const uint4*>(c3 + r * ldc)[c], z);
#pragma unroll
      for (int i = 0; i < 8; ++i) y[i] = round_bf16(y[i] + z[i]);
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) x[i] = x[i] + y[i];
    reinterpret_cast<uint4*>(out + r * ldo)[c] = bf16x8_pack(x);
  }
}

// c3 (nullable; bf16 only): out = a + bf16(b + c3).
template <typename T>
__global__ void add_kernel(const T* a, int64_t lda, const T* b, int64_t ldb, T* out, int64_t ldo, int64_t rows,
                           int64_t cols, const T* c3 = nullptr, int64_t ldc = 0) {
  const int64_t n = rows * cols;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = e / cols, c = e % cols;
    float bv = load_f32(b + r * ldb + c);
    if (c3 != nullptr) bv = round_bf16(bv + load_f32(c3 + r * ldc + c));
    store_f32(out + r * ldo + c, load_f32(a + r * lda + c) + bv);
  }
}

template <typename TI, typename TO>
__global__ void cast_kernel(const TI* __restrict__ src, int64_t lds, TO* __restrict__ dst, int64_t ldd, int64_t rows,
                            int64_t cols) {
  const int64_t n = rows * cols;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = e / cols, c = e % cols;
    store_f32(dst + r * ldd + c, load_f32(src + r * lds + c));
  }
}

__global__ void add_bias_kernel(float* y, int64_t ldy, const float* __restrict__ bias, int64_t rows, int64_t cols,
                                int4 cu, int groups) {
  const int64_t n = rows * cols;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = e / cols, c = e % cols;
    int m = 0;
    while (m + 1 < groups && r >= (m == 0 ? cu.y : cu.z)) ++m;
    y[r * ldy + c] += bias[m * cols + c];
  }
}

// Grid for a grid-stride loop over n elements (a few waves; the loop covers the rest).
unsigned blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 65536 ? (b > 0 ? b : 1) : 65536);
}

bool is_float(DType t) { return t == DType::BF16 || t == DType::F32; }

// bf16 rows that start 16-byte aligned: an aligned base and a row stride that is a multiple of 8.
bool vec_rows(const Tensor& t) {
  return reinterpret_cast<uintptr_t>(t.data()) % 16 == 0 && t.row_stride() % 8 == 0;
}

template <typename T>
T* ptr(const Tensor& t) {
  return static_cast<T*>(t.data());
}

}  // namespace

void rms_norm(const RmsNormParams& p, cudaStream_t s) {
  const int64_t rows = p.x.size(0), cols = p.x.size(1);
  MAGI2_CHECK(p.heads >= 1 && cols % p.heads == 0, "rms_norm: ", cols, " columns do not split into ", p.heads,
              " heads");
  const int64_t d = cols / p.heads;
  check_2d(p.x, rows, cols, "rms_norm.x");
  check_2d(p.y, rows, cols, "rms_norm.y");
  check_groups(p.groups, rows, "rms_norm");
  MAGI2_CHECK(is_float(p.x.dtype()) && is_float(p.y.dtype()), "rms_norm: x and y must be bf16 or f32");
  MAGI2_CHECK(p.w.device() == Device::CUDA && p.w.dtype() == DType::F32 && p.w.numel() == d * p.groups.count,
              "rms_norm.w: expected ", d * p.groups.count, " f32 values on the device, got ", shape_str(p.w.shape()));
  const bool q8 = p.y8.defined();
  if (q8) {
    MAGI2_CHECK(p.y.dtype() == DType::BF16 && p.heads == 1, "rms_norm.y8: needs a bf16 y and one head a row");
    check_fp8_rows(Device::CUDA, p.y8, rows, cols, "rms_norm.y8");
  }
  if (rows == 0) return;
  const int64_t vecs = rows * p.heads;
  const unsigned blocks = static_cast<unsigned>((vecs * 16 + kThreads - 1) / kThreads);
  const int64_t ldx = p.x.row_stride(), ldy = p.y.row_stride();
  const float* w = ptr<float>(p.w);
  const int4 cu = cu_of(p.groups);
  const bool xb = p.x.dtype() == DType::BF16, yb = p.y.dtype() == DType::BF16;
  const bool y_vec = yb ? vec_rows(p.y)
                        : reinterpret_cast<uintptr_t>(p.y.data()) % 16 == 0 && p.y.row_stride() % 4 == 0;
  const size_t row_smem = sizeof(uint16_t) * static_cast<size_t>(d) * kRowWarps;
  if (xb && p.heads == 1 && d % 8 == 0 && row_smem <= 48 * 1024 && vec_rows(p.x) && y_vec &&
      reinterpret_cast<uintptr_t>(w) % 16 == 0) {
    const unsigned row_blocks = static_cast<unsigned>((rows + kRowWarps - 1) / kRowWarps);
    const bool one_pass = q8 && p.y8.q.is_contiguous() && p.y8.scale.is_contiguous();
    if (one_pass)  // one pass writes y and its FP8 rows
      rms_norm_row_kernel<uint16_t, true><<<row_blocks, kRowWarps * 32, row_smem, s>>>(
          ptr<uint16_t>(p.x), ldx, ptr<uint16_t>(p.y), ldy, w, rows, static_cast<int>(d), cu, p.groups.count, p.eps,
          ptr<uint8_t>(p.y8.q), ptr<float>(p.y8.scale));
    else if (yb)
      rms_norm_row_kernel<<<row_blocks, kRowWarps * 32, row_smem, s>>>(ptr<uint16_t>(p.x), ldx, ptr<uint16_t>(p.y),
                                                                      ldy, w, rows, static_cast<int>(d), cu,
                                                                      p.groups.count, p.eps);
    else
      rms_norm_row_kernel<<<row_blocks, kRowWarps * 32, row_smem, s>>>(ptr<uint16_t>(p.x), ldx, ptr<float>(p.y), ldy,
                                                                      w, rows, static_cast<int>(d), cu,
                                                                      p.groups.count, p.eps);
    MAGI2_CUDA_CHECK_LAUNCH("rms_norm");
    if (q8 && !one_pass) quantize_fp8_rows_of(p.y, p.y8, s, "rms_norm.y8");
    return;
  }
  if (xb && yb)
    rms_norm_kernel<<<blocks, kThreads, 0, s>>>(ptr<uint16_t>(p.x), ldx, ptr<uint16_t>(p.y), ldy, w, rows, p.heads, d,
                                                cu, p.groups.count, p.eps);
  else if (xb)
    rms_norm_kernel<<<blocks, kThreads, 0, s>>>(ptr<uint16_t>(p.x), ldx, ptr<float>(p.y), ldy, w, rows, p.heads, d,
                                                cu, p.groups.count, p.eps);
  else if (yb)
    rms_norm_kernel<<<blocks, kThreads, 0, s>>>(ptr<float>(p.x), ldx, ptr<uint16_t>(p.y), ldy, w, rows, p.heads, d,
                                                cu, p.groups.count, p.eps);
  else
    rms_norm_kernel<<<blocks, kThreads, 0, s>>>(ptr<float>(p.x), ldx, ptr<float>(p.y), ldy, w, rows, p.heads, d, cu,
                                                p.groups.count, p.eps);
  MAGI2_CUDA_CHECK_LAUNCH("rms_norm");
  if (q8) quantize_fp8_rows_of(p.y, p.y8, s, "rms_norm.y8");  // rows the one-pass kernel does not take
}

namespace {

template <bool kFast>
void launch_swiglu7_vec(const SwiGLU7Params& p, int64_t rows, int64_t half, bool q8, cudaStream_t s) {
  const unsigned blocks = blocks_for(rows * half / 8);
  if (q8)
    swiglu7_vec_kernel<true, kFast><<<blocks, kThreads, 0, s>>>(
        ptr<uint16_t>(p.u), p.u.row_stride(), ptr<uint16_t>(p.z), p.z.row_stride(), static_cast<uint32_t>(rows),
        static_cast<uint32_t>(half / 8), ptr<uint8_t>(p.z8.q), p.z8.q.row_stride(), ptr<float>(p.z8.scale),
        p.z8.scale.row_stride());
  else
    swiglu7_vec_kernel<false, kFast><<<blocks, kThreads, 0, s>>>(ptr<uint16_t>(p.u), p.u.row_stride(),
                                                                 ptr<uint16_t>(p.z), p.z.row_stride(),
                                                                 static_cast<uint32_t>(rows),
                                                                 static_cast<uint32_t>(half / 8));
  MAGI2_CUDA_CHECK_LAUNCH("swiglu7");
}

}  // namespace

void swiglu7(const SwiGLU7Params& p, cudaStream_t s, bool fast) {
  const int64_t rows = p.u.size(0), half = p.z.size(1);
  check_2d(p.u, rows, 2 * half, "swiglu7.u");
  check_2d(p.z, rows, half, "swiglu7.z");
  MAGI2_CHECK(p.u.dtype() == DType::BF16 && p.z.dtype() == DType::BF16, "swiglu7: u and z must be bf16");
  const bool q8 = p.z8.defined();
  if (q8) check_fp8_rows(Device::CUDA, p.z8, rows, half, "swiglu7.z8");
  if (rows * half == 0) return;
  if (vec_rows(p.u) && vec_rows(p.z) && half % 8 == 0 && rows * (half / 8) < (int64_t{1} << 31)) {
    // z's FP8 rows in the same pass where their rows are 8-byte aligned, else in a second pass.
    const bool one_pass = q8 && reinterpret_cast<uintptr_t>(p.z8.q.data()) % 8 == 0 && p.z8.q.row_stride() % 8 == 0;
    if (fast)
      launch_swiglu7_vec<true>(p, rows, half, one_pass, s);
    else
      launch_swiglu7_vec<false>(p, rows, half, one_pass, s);
    if (q8 && !one_pass) quantize_fp8_rows_of(p.z, p.z8, s, "swiglu7.z8");
    return;
  }
  swiglu7_kernel<<<blocks_for(rows * half), kThreads, 0, s>>>(ptr<uint16_t>(p.u), p.u.row_stride(),
                                                               ptr<uint16_t>(p.z), p.z.row_stride(), rows, half);
  MAGI2_CUDA_CHECK_LAUNCH("swiglu7");
  if (q8) quantize_fp8_rows_of(p.z, p.z8, s, "swiglu7.z8");
}

void gate(const GateParams& p, cudaStream_t s) {
  MAGI2_CHECK(p.o.device() == Device::CUDA && p.o.dim() == 3 && p.o.dtype() == DType::BF16 && p.o.is_contiguous(),
              "gate.o: expected contiguous bf16 [T, H, hd] on the device");
  const int64_t t = p.o.size(0), h = p.o.size(1), hd = p.o.size(2);
  check_2d(p.g, t, h, "gate.g");
  MAGI2_CHECK(p.g.dtype() == DType::BF16, "gate.g: expected bf16");
  if (t * h * hd == 0) return;
  gate_kernel<<<blocks_for(t * h * hd), kThreads, 0, s>>>(ptr<uint16_t>(p.o), ptr<uint16_t>(p.g), p.g.row_stride(), t,
                                                           h, hd);
  MAGI2_CUDA_CHECK_LAUNCH("gate");
}

void add(const AddParams& p, cudaStream_t s) {
  const int64_t rows = p.out.size(0), cols = p.out.size(1);
  check_2d(p.a, rows, cols, "add.a");
  check_2d(p.b, rows, cols, "add.b");
  check_2d(p.out, rows, cols, "add.out");
  const DType dt = p.out.dtype();
  MAGI2_CHECK(is_float(dt) && p.a.dtype() == dt && p.b.dtype() == dt, "add: expected all-bf16 or all-f32 operands");
  const bool c3 = p.c.defined();
  if (c3) {
    check_2d(p.c, rows, cols, "add.c");
    MAGI2_CHECK(dt == DType::BF16 && p.c.dtype() == dt, "add.c: expected all-bf16 operands with a third term");
  }
  if (rows * cols == 0) return;
  if (dt == DType::BF16 && vec_rows(p.a) && vec_rows(p.b) && vec_rows(p.out) && (!c3 || vec_rows(p.c)) &&
      cols % 8 == 0 && rows * (cols / 8) < (int64_t{1} << 31)) {
    const unsigned grid = blocks_for(rows * cols / 8);
    const auto r32 = static_cast<uint32_t>(rows), c8 = static_cast<uint32_t>(cols / 8);
    if (c3)
      add_vec_kernel<true><<<grid, kThreads, 0, s>>>(ptr<uint16_t>(p.a), p.a.row_stride(), ptr<uint16_t>(p.b),
                                                     p.b.row_stride(), ptr<uint16_t>(p.out), p.out.row_stride(), r32,
                                                     c8, ptr<uint16_t>(p.c), p.c.row_stride());
    else
      add_vec_kernel<<<grid, kThreads, 0, s>>>(ptr<uint16_t>(p.a), p.a.row_stride(), ptr<uint16_t>(p.b),
                                               p.b.row_stride(), ptr<uint16_t>(p.out), p.out.row_stride(), r32, c8);
    MAGI2_CUDA_CHECK_LAUNCH("add");
    return;
  }
  if (dt == DType::F32)
    add_kernel<<<blocks_for(rows * cols), kThreads, 0, s>>>(ptr<float>(p.a), p.a.row_stride(), ptr<float>(p.b),
                                                             p.b.row_stride(), ptr<float>(p.out), p.out.row_stride(),
                                                             rows, cols);
  else
    add_kernel<<<blocks_for(rows * cols), kThreads, 0, s>>>(
        ptr<uint16_t>(p.a), p.a.row_stride(), ptr<uint16_t>(p.b), p.b.row_stride(), ptr<uint16_t>(p.out),
        p.out.row_stride(), rows, cols, c3 ? ptr<uint16_t>(p.c) : nullptr, c3 ? p.c.row_stride() : 0);
  MAGI2_CUDA_CHECK_LAUNCH("add");
}

void cast(const CastParams& p, cudaStream_t s) {
  const int64_t rows = p.dst.size(0), cols = p.dst.size(1);
  check_2d(p.src, rows, cols, "cast.src");
  check_2d(p.dst, rows, cols, "cast.dst");
  MAGI2_CHECK(is_float(p.src.dtype()) && is_float(p.dst.dtype()), "cast: src and dst must be bf16 or f32");
  if (rows * cols == 0) return;
  const unsigned b = blocks_for(rows * cols);
  const int64_t ls = p.src.row_stride(), ld = p.dst.row_stride();
  const bool sb = p.src.dtype() == DType::BF16, db = p.dst.dtype() == DType::BF16;
  if (sb && db)
    cast_kernel<<<b, kThreads, 0, s>>>(ptr<uint16_t>(p.src), ls, ptr<uint16_t>(p.dst), ld, rows, cols);
  else if (sb)
    cast_kernel<<<b, kThreads, 0, s>>>(ptr<uint16_t>(p.src), ls, ptr<float>(p.dst), ld, rows, cols);
  else if (db)
    cast_kernel<<<b, kThreads, 0, s>>>(ptr<float>(p.src), ls, ptr<uint16_t>(p.dst), ld, rows, cols);
  else
    cast_kernel<<<b, kThreads, 0, s>>>(ptr<float>(p.src), ls, ptr<float>(p.dst), ld, rows, cols);
  MAGI2_CUDA_CHECK_LAUNCH("cast");
}

void add_bias_f32(const Tensor& y, const Tensor& bias, const Groups& g, cudaStream_t s) {
  const int64_t rows = y.size(0), cols = y.size(1);
  if (rows * cols == 0) return;
  add_bias_kernel<<<blocks_for(rows * cols), kThreads, 0, s>>>(ptr<float>(y), y.row_stride(), ptr<float>(bias), rows,
                                                                cols, cu_of(g), g.count);
  MAGI2_CUDA_CHECK_LAUNCH("linear bias");
}

}  // namespace magi2::cuda
