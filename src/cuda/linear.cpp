// Grouped linear on cuBLASLt (spec magi2-dit.md §4.2, §3.8): y = x W_m^T per
// row group, fp32 accumulation (CUBLAS_COMPUTE_32F: true fp32, no TF32) and
// one rounding of the fp32 result to y's dtype, the CPU reference's rounding
// point. The fp32 summation order is cuBLAS's own, so bf16 outputs can differ
// from the CPU's by one bf16 ulp where the fp32 sum sits near a rounding
// boundary (tests/cuda/test_cuda_backend.cpp measures it).
#include "cuda/linear.h"

#include <cublasLt.h>

#include "cuda/cuda_common.h"
#include "cuda/env_choice.h"
#include "cuda/linear_fp8.h"
#include "ops/numerics.h"
#include "ops/op_checks.h"

#define MAGI2_CUBLAS_CHECK(expr)                                                                          \
  do {                                                                                                    \
    const cublasStatus_t magi2_st_ = (expr);                                                              \
    if (magi2_st_ != CUBLAS_STATUS_SUCCESS)                                                               \
      throw ::magi2::Error(::magi2::str_cat("cuBLASLt error in ", #expr, ": ", cublasLtGetStatusString(magi2_st_))); \
  } while (0)

namespace magi2::cuda {

namespace {

// Largest power of two <= 16 that divides the address.
uint32_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 16;
  while (al > 1 && a % al != 0) al /= 2;
  return al;
}

cudaDataType_t cuda_type(DType t) { return t == DType::BF16 ? CUDA_R_16BF : CUDA_R_32F; }

// RAII holders for the cuBLASLt descriptors of one call.
struct Layout {
  cublasLtMatrixLayout_t h = nullptr;
  Layout(cudaDataType_t t, uint64_t rows, uint64_t cols, int64_t ld) {
    MAGI2_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&h, t, rows, cols, ld));
  }
  ~Layout() { cublasLtMatrixLayoutDestroy(h); }
  Layout(const Layout&) = delete;
  Layout& operator=(const Layout&) = delete;
};

struct MatmulDesc {
  cublasLtMatmulDesc_t h = nullptr;
  MatmulDesc() {
    MAGI2_CUBLAS_CHECK(cublasLtMatmulDescCreate(&h, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    MAGI2_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(h, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    MAGI2_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(h, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  }
  // FP8 block scaling: A (the weights) per 128 x 128 block, B (the activations)
  // per 1 x 128 group, both fp32 multipliers (DeepSeek-V3's weight_scale_inv).
  MatmulDesc(const float* a_scale, const float* b_scale) : MatmulDesc() {
    const int32_t am = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F, bm = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    MAGI2_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(h, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &am, sizeof(am)));
    MAGI2_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(h, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &bm, sizeof(bm)));
    MAGI2_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(h, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale,
                                                      sizeof(a_scale)));
    MAGI2_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(h, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale,
                                                      sizeof(b_scale)));
  }
  ~MatmulDesc() { cublasLtMatmulDescDestroy(h); }
  MatmulDesc(const MatmulDesc&) = delete;
  MatmulDesc& operator=(const MatmulDesc&) = delete;
};

}  // namespace

LinearRunner::LinearRunner(void* workspace, size_t workspace_bytes, DeviceAlloc alloc)
    : workspace_(workspace), workspace_bytes_(workspace_bytes), alloc_(alloc), act8_(alloc), wsc8_(std::move(alloc)) {
  cublasLtHandle_t h = nullptr;
  MAGI2_CUBLAS_CHECK(cublasLtCreate(&h));
  handle_ = h;
}

LinearRunner::~LinearRunner() { cublasLtDestroy(static_cast<cublasLtHandle_t>(handle_)); }

void LinearRunner::gemm(const Tensor& x, const Tensor& w, const Tensor& y, int64_t w_row0, int64_t rows,
                        cudaStream_t s) {
  const int64_t in = x.size(1), out = y.size(1);
  const cudaDataType_t t = cuda_type(x.dtype());
  // Row-major y[R, out] = x[R, in] W[out, in]^T is column-major y^T = W^T-op * x^T:
  // A = W seen column-major as [in, out] (ld in), op T; B = x as [in, R] (ld = row stride).
  const size_t elt = dtype_size(x.dtype());
  const char* wp = static_cast<const char*>(w.data()) + w_row0 * in * static_cast<int64_t>(elt);
  // The chosen algorithm must suit the pointers' alignment (a group's row slice
  // can start off a 16-byte boundary), so the alignment is part of the key.
  const uint32_t al_a = alignment_of(wp), al_b = alignment_of(x.data()), al_c = alignment_of(y.data());
  const Key key{rows, in, out, x.row_stride(), y.row_stride(),
                static_cast<int64_t>(x.dtype()) | (static_cast<int64_t>(al_a) << 8) |
                    (static_cast<int64_t>(al_b) << 16) | (static_cast<int64_t>(al_c) << 24) |
                    (static_cast<int64_t>(y.dtype()) << 32)};
  auto it = algos_.find(key);
  Layout a(t, in, out, in), b(t, in, rows, x.row_stride()), c(cuda_type(y.dtype()), out, rows, y.row_stride());
  MatmulDesc desc;
  if (it == algos_.end()) {
    cublasLtMatmulPreference_t pref = nullptr;
    MAGI2_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t ws = workspace_bytes_;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof(al_a));
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof(al_b));
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof(al_c));
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c, sizeof(al_c));
    cublasLtMatmulHeuristicResult_t res{};
    int found = 0;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(static_cast<cublasLtHandle_t>(handle_), desc.h, a.h,
                                                             b.h, c.h, c.h, pref, 1, &res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    MAGI2_CHECK(st == CUBLAS_STATUS_SUCCESS && found > 0, "CUDA backend: linear: cuBLASLt has no algorithm for [",
                rows, " x ", in, "] x [", in, " x ", out, "] ", dtype_name(x.dtype()), " -> ", dtype_name(y.dtype()));
    it = algos_.emplace(key, std::make_shared<cublasLtMatmulAlgo_t>(res.algo)).first;
  }
  const float alpha = 1.f, beta = 0.f;
  MAGI2_CUBLAS_CHECK(cublasLtMatmul(static_cast<cublasLtHandle_t>(handle_), desc.h, &alpha, wp, a.h, x.data(), b.h,
                                    &beta, y.data(), c.h, y.data(), c.h,
                                    static_cast<const cublasLtMatmulAlgo_t*>(it->second.get()), workspace_,
                                    workspace_bytes_, s));
}

std::shared_ptr<void> LinearRunner::fp8_lt_algo(int64_t rows, int64_t in, int64_t out, int64_t ldx, const void* y,
                                                int64_t ldy) {
  Layout a(CUDA_R_8F_E4M3, in, out, in), b(CUDA_R_8F_E4M3, in, rows, ldx), c(CUDA_R_16BF, out, rows, ldy);
  MatmulDesc desc(nullptr, nullptr);
  cublasLtMatmulPreference_t pref = nullptr;
  MAGI2_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = workspace_bytes_;
  const uint32_t al_c = alignment_of(y);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof(al_c));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c, sizeof(al_c));
  cublasLtMatmulHeuristicResult_t res{};
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(static_cast<cublasLtHandle_t>(handle_), desc.h, a.h, b.h,
                                                           c.h, c.h, pref, 1, &res, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0) return nullptr;  // the caller falls back to CUTLASS
  return std::make_shared<cublasLtMatmulAlgo_t>(res.algo);
}

void LinearRunner::fp8_lt_gemm(const void* algo, const uint8_t* xq, const float* xs, const void* w,
                               const float* ws, void* y, int64_t rows, int64_t in, int64_t out, int64_t ldx,
                               int64_t ldy, cudaStream_t s) {
  Layout a(CUDA_R_8F_E4M3, in, out, in), b(CUDA_R_8F_E4M3, in, rows, ldx), c(CUDA_R_16BF, out, rows, ldy);
  MatmulDesc desc(ws, xs);
  const float alpha = 1.f, beta = 0.f;
  MAGI2_CUBLAS_CHECK(cublasLtMatmul(static_cast<cublasLtHandle_t>(handle_), desc.h, &alpha, w, a.h, xq, b.h, &beta,
                                    y, c.h, y, c.h, static_cast<const cublasLtMatmulAlgo_t*>(algo), workspace_,
                                    workspace_bytes_, s));
}

LinearRunner::Fp8Plan& LinearRunner::fp8_plan(const LinearParams& p, cudaStream_t s) {
  const int64_t rows = p.x.size(0), in = p.x.size(1), out = p.y.size(1);
  const Groups& g = p.groups;
  // The e4m3 rows' stride: the own quantiser's compact rows, or the producer's (a column slice's).
  const int64_t ldx = p.x8.defined() ? p.x8.q.row_stride() : in;
  const Fp8Key key{out, in, ldx, p.y.row_stride(), g.cu[0], g.cu[1], g.cu[2], g.cu[3]};
  auto it = fp8_plans_.find(key);
  if (it != fp8_plans_.end()) return it->second;
  check_not_capturing(s, "linear (FP8): no GEMM planned for [", rows, " x ", in, "] -> ", out,
                      "; run one eager forward at this shape before capturing a CUDA graph");
  Fp8Plan plan;
  // cuBLASLt's block-scaled FP8 by default (library first); CUTLASS where it
  // has no algorithm or when asked for (MAGI2_FP8_LINEAR_GEMM, a measurement knob).
  plan.lt = env_choice("MAGI2_FP8_LINEAR_GEMM", {"cublaslt", "cutlass"}) != 1;
  for (int i = 0; plan.lt && i < g.count; ++i) {
    const int64_t r0 = g.cu[i], r1 = g.cu[i + 1];
    if (r0 == r1) continue;
    plan.lt_algo[i] = fp8_lt_algo(r1 - r0, in, out, ldx, p.y.slice_rows(r0, r1).data(), p.y.row_stride());
    plan.lt = plan.lt_algo[i] != nullptr;
  }
  if (!plan.lt) {
    MAGI2_CHECK(MAGI2_HAVE_CUTLASS, "CUDA backend: linear (FP8): cuBLASLt has no block-scaled FP8 algorithm for [",
                rows, " x ", in, "] -> ", out, " and the build has no CUTLASS headers");
#if MAGI2_HAVE_CUTLASS
    plan.gemm = make_fp8_linear_gemm_bf16({.experts = g.count, .parts = 1, .n = out, .k = in, .lda = ldx,
                                           .ldd = p.y.row_stride()},
                                          alloc_);
#endif
    int32_t cu[4] = {};
    for (int i = 0; i <= g.count; ++i) cu[i] = static_cast<int32_t>(g.cu[i]);
    plan.offsets = alloc_(sizeof(cu));
    MAGI2_CUDA_CHECK(cudaMemcpyAsync(plan.offsets.get(), cu, sizeof(cu), cudaMemcpyHostToDevice, s));
    MAGI2_CUDA_CHECK(cudaStreamSynchronize(s));  // `cu` lives on this stack frame
  }
  return fp8_plans_.emplace(key, std::move(plan)).first->second;
}

void LinearRunner::run_fp8(const LinearParams& p, cudaStream_t s) {
  check_linear_fp8(Device::CUDA, p);
  const int64_t rows = p.x.size(0), in = p.x.size(1), out = p.y.size(1);
  MAGI2_CHECK(in % kFp8Block == 0 && out % kFp8Block == 0, "CUDA backend: linear (FP8) needs in and out multiples of ",
              kFp8Block, ", got [", in, " -> ", out, "] (the CPU backend takes any width)");
  MAGI2_CHECK(reinterpret_cast<uintptr_t>(p.y.data()) % 16 == 0 && p.y.row_stride() % 8 == 0,
              "CUDA backend: linear (FP8): y must be 16-byte aligned with a row stride of a multiple of 8");
  MAGI2_CHECK(!p.x8.defined() ||
                  (reinterpret_cast<uintptr_t>(p.x8.q.data()) % 16 == 0 && p.x8.q.row_stride() % 16 == 0),
              "CUDA backend: linear (FP8): linear.x8's e4m3 rows must be 16-byte aligned");
  if (rows == 0) return;
  const Fp8Plan& plan = fp8_plan(p, s);
  const Groups& g = p.groups;
  // x -> e4m3 rows + scales (256-byte aligned parts of one scratch): row-major
  // scales for CUTLASS; for cuBLASLt one [kb, rows_g] block per row group.
  const int64_t kb = in / kFp8Block;
  const auto round256 = [](int64_t bytes) { return (bytes + 255) / 256 * 256; };
  Fp8ScaleLayout layout;
  int64_t scale_bytes = rows * kb * 4;
  if (plan.lt) {
    layout.groups = g.count;
    scale_bytes = 0;
    for (int i = 0; i < g.count; ++i) {
      layout.cu[i + 1] = g.cu[i + 1];
      layout.off[i] = scale_bytes / 4;
      scale_bytes += round256((g.cu[i + 1] - g.cu[i]) * kb * 4);
    }
  }
  // x8 from the producer (LinearParams::x8): its e4m3 rows as they are and its
  // row-major scales as they are (CUTLASS, compact rows) or regrouped (~3 MB at 272p).
  const bool pre = p.x8.defined();
  const int64_t ldx = pre ? p.x8.q.row_stride() : in;
  const uint8_t* xq = nullptr;
  const float* xs = nullptr;
  if (pre && !plan.lt && p.x8.scale.row_stride() == kb) {
    xq = p.x8.q.data_as<uint8_t>();
    xs = p.x8.scale.data_as<float>();
  } else {
    const int64_t q_bytes = pre ? 0 : round256(rows * in);
    char* buf = static_cast<char*>(act8_.get(static_cast<size_t>(q_bytes + scale_bytes), s, "linear (FP8)"));
    auto* sq = reinterpret_cast<uint8_t*>(buf);
    auto* ss = reinterpret_cast<float*>(buf + q_bytes);
    if (pre) {
      xq = p.x8.q.data_as<uint8_t>();
      regroup_fp8_scales(p.x8.scale.data_as<float>(), p.x8.scale.row_stride(), rows, kb, ss, layout, s);
    } else {
      xq = sq;
      quantize_rows_fp8(p.x.data_as<uint16_t>(), p.x.row_stride(), rows, in, sq, ss, s, layout);
    }
    xs = ss;
  }
  const auto* wsc = p.w_scale.data_as<float>();
  if (!plan.lt) {
    const void* b[1] = {p.w.data()};
    const float* sb[1] = {wsc};
    plan.gemm->run(static_cast<const int32_t*>(plan.offsets.get()), xq, xs, b, sb, p.y.data(), s);
    return;
  }
  // cuBLASLt reads a 128 x 128 scale grid with its K-block stride padded to a
  // multiple of 4 (16 bytes), as PyTorch's blockwise scaled_mm lays it out; the
  // checkpoint's [out / 128, in / 128] grid is copied so when in / 128 is not
  // (the shared experts' fc2: 1280 / 128 = 10). A few KB a call, in the graph.
  const int64_t ob = out / kFp8Block, ld = (kb + 3) / 4 * 4;
  if (ld != kb) {
    auto* padded = static_cast<float*>(
        wsc8_.get(static_cast<size_t>(g.count * ob * ld) * 4, s, "linear (FP8): padded weight scales"));
    MAGI2_CUDA_CHECK(cudaMemcpy2DAsync(padded, static_cast<size_t>(ld) * 4, wsc, static_cast<size_t>(kb) * 4,
                                       static_cast<size_t>(kb) * 4, static_cast<size_t>(g.count * ob),
                                       cudaMemcpyDeviceToDevice, s));
    wsc = padded;
  }
  const auto* w8 = static_cast<const uint8_t*>(p.w.data());
  for (int i = 0; i < g.count; ++i) {
    const int64_t r0 = g.cu[i], r1 = g.cu[i + 1];
    if (r0 == r1) continue;
    fp8_lt_gemm(plan.lt_algo[i].get(), xq + r0 * ldx, xs + layout.off[i], w8 + i * out * in, wsc + i * ob * ld,
                p.y.slice_rows(r0, r1).data(), r1 - r0, in, out, ldx, p.y.row_stride(), s);
  }
}

void LinearRunner::run(const LinearParams& p, cudaStream_t s) {
  if (p.w_scale.defined() || p.w.dtype() == DType::F8E4M3) return run_fp8(p, s);
  const int64_t rows = p.x.size(0), in = p.x.size(1), out = p.y.size(1);
  check_2d(p.x, rows, in, "linear.x");
  check_2d(p.y, rows, out, "linear.y");
  check_groups(p.groups, rows, "linear");
  const DType dt = p.x.dtype();
  MAGI2_CHECK((dt == DType::BF16 || dt == DType::F32) && p.w.dtype() == dt && p.y.dtype() == dt,
              "linear: x, W and y must all be bf16 or all f32");
  MAGI2_CHECK(p.w.device() == Device::CUDA && p.w.is_contiguous() && p.w.dim() == 2 &&
                  p.w.size(0) == out * p.groups.count && p.w.size(1) == in,
              "linear.w: expected [", out * p.groups.count, ", ", in, "] on the device, got ", shape_str(p.w.shape()));
  if (p.bias.defined()) {
    MAGI2_CHECK(dt == DType::F32, "CUDA backend: linear with a bias on bf16 operands is not implemented yet");
    MAGI2_CHECK(p.bias.device() == Device::CUDA && p.bias.dtype() == DType::F32 &&
                    p.bias.numel() == out * p.groups.count,
                "linear.bias: expected ", out * p.groups.count, " f32 values on the device");
  }
  for (int g = 0; g < p.groups.count; ++g) {
    const int64_t r0 = p.groups.cu[g], r1 = p.groups.cu[g + 1];
    if (r0 == r1) continue;
    gemm(p.x.slice_rows(r0, r1), p.w, p.y.slice_rows(r0, r1), g * out, r1 - r0, s);
  }
  // fp32: the bias joins the rounded fp32 dot product, as on the CPU (dot, then + bias).
  if (p.bias.defined() && rows > 0) add_bias_f32(p.y, p.bias, p.groups, s);
}

void LinearRunner::run_f32_out(const Tensor& x, const Tensor& w, const Tensor& y, const Groups& groups,
                               cudaStream_t s) {
  const int64_t rows = x.size(0), in = x.size(1), out = y.size(1);
  check_2d(x, rows, in, "linear (fp32 out).x");
  check_2d(y, rows, out, "linear (fp32 out).y");
  check_groups(groups, rows, "linear (fp32 out)");
  MAGI2_CHECK(x.dtype() == DType::BF16 && w.dtype() == DType::BF16 && y.dtype() == DType::F32 &&
                  w.is_contiguous() && w.dim() == 2 && w.size(0) == out * groups.count && w.size(1) == in,
              "linear (fp32 out): expected bf16 x, bf16 W [", out * groups.count, ", ", in, "] and f32 y");
  for (int g = 0; g < groups.count; ++g) {
    const int64_t r0 = groups.cu[g], r1 = groups.cu[g + 1];
    if (r0 == r1) continue;
    gemm(x.slice_rows(r0, r1), w, y.slice_rows(r0, r1), g * out, r1 - r0, s);
  }
}

}  // namespace magi2::cuda
