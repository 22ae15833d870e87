// The one CUTLASS configuration of the expert-bank grouped GEMM (moe_gemm.h),
// included by one .cu file per output type and epilogue: sm90 ptr-array
// grouped GEMM, cooperative warp-specialised, 128 x 256 x 64 tiles, 2 x 1
// clusters (the best of the configurations measured at the release shapes,
// ../shared/cuda-design.md), bf16 operands (A row-major, B [k, n] row-major as
// the checkpoint stores the banks), fp32 accumulation. Epilogue (EpilogueKind):
// D = accumulator (no C operand); kSwiglu7: D = bf16(swiglu7(bf16(acc), C))
// where C is the up projection the previous GEMM wrote next to D (an EVT: the
// gate never leaves the registers); kRowScale: D = bf16(acc x s[row]) with one
// fp32 scale per row (W2 times the routing weight). Needs -DNDEBUG and sm_90a.
#pragma once

#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/group_array_problem_shape.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/util/packed_stride.hpp>

#include <cute/tensor.hpp>

#include "core/error.h"
#include "cuda/cuda_common.h"
#include "cuda/cutlass_grouped.cuh"
#include "cuda/device_fp.cuh"
#include "cuda/moe_gemm.h"
#include "ops/numerics.h"

namespace magi2::cuda::moe_gemm {

using cute::_0;
using cute::_1;
using cute::_2;
using cute::_64;
using cute::_128;
using cute::_256;
using cute::make_shape;

// SwiGLU7 of the routed experts (moe_grouped.cu's expert_swiglu7, the same
// rounding points): the gate accumulator rounded to bf16 (as W13's output),
// the up value already bf16 (C), the SFU sigmoid; the epilogue rounds Z to bf16.
template <class T>
struct Swiglu7Fn {
  CUTLASS_HOST_DEVICE T operator()(T const& g, T const& u) const { return one(g, u); }
  CUTLASS_DEVICE static float one(float g, float u) {
    return swiglu7_f32(dev::bf16_to_f32(dev::f32_to_bf16(g)), u, [](float x) { return dev::sigmoid_fast_f32(x); });
  }
};
template <class T, int N>
struct Swiglu7Fn<cutlass::Array<T, N>> {
  CUTLASS_DEVICE cutlass::Array<T, N> operator()(cutlass::Array<T, N> const& g, cutlass::Array<T, N> const& u) const {
    cutlass::Array<T, N> z;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) z[i] = Swiglu7Fn<float>::one(g[i], u[i]);
    return z;
  }
};

enum class EpilogueKind { kPlain, kSwiglu7, kRowScale };

template <class ElementD, EpilogueKind kKind, class TileShape>
struct Epilogue {  // D = accumulator
  using ElementC = void;
  using Fusion = cutlass::epilogue::fusion::LinearCombination<ElementD, float, void, float>;
};
template <class ElementD, class TileShape>
struct Epilogue<ElementD, EpilogueKind::kSwiglu7, TileShape> {  // D = swiglu7(bf16(accumulator), C)
  using ElementC = cutlass::bfloat16_t;
  using Fusion = cutlass::epilogue::fusion::Sm90EVT<
      cutlass::epilogue::fusion::Sm90Compute<Swiglu7Fn, ElementD, float, cutlass::FloatRoundStyle::round_to_nearest>,
      cutlass::epilogue::fusion::Sm90AccFetch, cutlass::epilogue::fusion::Sm90SrcFetch<cutlass::bfloat16_t>>;
};
// D = accumulator x scale[row]: a column vector per group (its own pointer,
// alignment 1: a group's rows start anywhere), rounded once to ElementD.
using RowScaleStride = cute::Stride<_1, _0, int64_t>;
template <class ElementD, class TileShape>
struct Epilogue<ElementD, EpilogueKind::kRowScale, TileShape> {
  using ElementC = void;
  using Fusion = cutlass::epilogue::fusion::Sm90EVT<
      cutlass::epilogue::fusion::Sm90Compute<cutlass::multiplies, ElementD, float,
                                             cutlass::FloatRoundStyle::round_to_nearest>,
      cutlass::epilogue::fusion::Sm90AccFetch,
      cutlass::epilogue::fusion::Sm90ColBroadcast<0, TileShape, float*, float, RowScaleStride, 1>>;
};

template <class ElementD, EpilogueKind kKind = EpilogueKind::kPlain>
struct Config {
  using ProblemShape = cutlass::gemm::GroupProblemShape<cute::Shape<int, int, int>>;
  using ElementA = cutlass::bfloat16_t;
  using ElementB = cutlass::bfloat16_t;
  using LayoutA = cutlass::layout::RowMajor;
  using LayoutB = cutlass::layout::RowMajor;
  using LayoutD = cutlass::layout::RowMajor;
  static constexpr int kAlignA = 8, kAlignB = 8;
  static constexpr int kAlignD = 128 / cutlass::sizeof_bits<ElementD>::value;
  using TileShape = cute::Shape<_128, _256, _64>;
  using ClusterShape = cute::Shape<_2, _1, _1>;
  using Epi = Epilogue<ElementD, kKind, TileShape>;
  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, typename Epi::ElementC, LayoutD*, kAlignD,
      ElementD, LayoutD*, kAlignD, cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative,
      typename Epi::Fusion>::CollectiveOp;
  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementA, LayoutA*, kAlignA, ElementB, LayoutB*, kAlignB,
      float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename CollectiveEpilogue::SharedStorage))>,
      cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, CollectiveMainloop, CollectiveEpilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  using StrideA = typename Kernel::InternalStrideA;
  using StrideB = typename Kernel::InternalStrideB;
  using StrideD = typename Kernel::InternalStrideD;
  using StrideC = typename Kernel::InternalStrideC;
  using Shape3 = typename ProblemShape::UnderlyingProblemShape;
};

// Per-group arrays, filled on the device from the expert offsets (no host sync).
// With the SwiGLU7 epilogue (pc non-null) C is the n columns after D's; with
// the row-scale epilogue (ps non-null) the scales of a group's rows start at its row.
template <class C, class ElementD>
__global__ void fill_groups(const int32_t* __restrict__ offsets, int experts, int parts, int n, int k, int64_t lda,
                            int64_t ldd, const cutlass::bfloat16_t* a, const cutlass::bfloat16_t* b0,
                            const cutlass::bfloat16_t* b1, ElementD* d, typename C::Shape3* shapes,
                            const cutlass::bfloat16_t** pa, const cutlass::bfloat16_t** pb, ElementD** pd,
                            typename C::StrideA* sa, typename C::StrideB* sb, typename C::StrideD* sd,
                            typename C::StrideA va, typename C::StrideB vb, typename C::StrideD vd,
                            const cutlass::bfloat16_t** pc, typename C::StrideC* sc, typename C::StrideC vc,
                            const float* row_scale, const float** ps) {
  const int g = blockIdx.x * blockDim.x + threadIdx.x;
  if (g >= experts * parts) return;
  const int f = g / parts, s = g % parts;
  const int64_t row = offsets[f];
  shapes[g] = make_shape(offsets[f + 1] - offsets[f], n, k);
  pa[g] = a + row * lda;
  pb[g] = (s == 0 ? b0 : b1) + static_cast<int64_t>(f) * k * n;
  pd[g] = d + row * ldd + static_cast<int64_t>(s) * n;
  sa[g] = va;
  sb[g] = vb;
  sd[g] = vd;
  if (pc != nullptr) {
    pc[g] = reinterpret_cast<const cutlass::bfloat16_t*>(d + row * ldd + static_cast<int64_t>(s + 1) * n);
    sc[g] = vc;
  }
  if (ps != nullptr) ps[g] = row_scale + row;
}

template <class ElementD, EpilogueKind kKind = EpilogueKind::kPlain>
class Runner final : public ExpertGemm {
  using C = Config<ElementD, kKind>;
  static constexpr bool kSwiglu7 = kKind == EpilogueKind::kSwiglu7;
  static constexpr bool kRowScale = kKind == EpilogueKind::kRowScale;
  static_assert(!kSwiglu7 || sizeof(ElementD) == 2, "the SwiGLU7 epilogue reads its C from D's bf16 buffer");

 public:
  Runner(const ExpertGemmShape& sh, const DeviceAlloc& alloc) : sh_(sh) {
    MAGI2_CHECK(sh.experts > 0 && (sh.parts == 1 || sh.parts == 2) && sh.n > 0 && sh.k > 0,
                "expert GEMM: bad shape");
    MAGI2_CHECK(sh.n % 8 == 0 && sh.k % 8 == 0 && sh.lda % 8 == 0 && sh.ldd % C::kAlignD == 0,
                "expert GEMM: widths must be multiples of 8 (n ", sh.n, ", k ", sh.k, ")");
    MAGI2_CHECK(!kSwiglu7 || (sh.parts == 1 && sh.ldd >= 2 * sh.n),
                "expert GEMM with the SwiGLU7 epilogue: one bank, and D rows hold the up values after D (ldd ", sh.ldd,
                ", n ", sh.n, ")");
    groups_ = sh.experts * sh.parts;
    const size_t g = static_cast<size_t>(groups_);
    auto take = [&](size_t bytes) {
      std::shared_ptr<void> p = alloc((bytes + 255) / 256 * 256);
      blocks_.push_back(p);
      return p.get();
    };
    shapes_ = static_cast<typename C::Shape3*>(take(g * sizeof(typename C::Shape3)));
    pa_ = static_cast<const cutlass::bfloat16_t**>(take(g * sizeof(void*)));
    pb_ = static_cast<const cutlass::bfloat16_t**>(take(g * sizeof(void*)));
    pd_ = static_cast<ElementD**>(take(g * sizeof(void*)));
    sa_ = static_cast<typename C::StrideA*>(take(g * sizeof(typename C::StrideA)));
    sb_ = static_cast<typename C::StrideB*>(take(g * sizeof(typename C::StrideB)));
    sd_ = static_cast<typename C::StrideD*>(take(g * sizeof(typename C::StrideD)));
    if constexpr (kSwiglu7) {
      pc_ = static_cast<const cutlass::bfloat16_t**>(take(g * sizeof(void*)));
      sc_ = static_cast<typename C::StrideC*>(take(g * sizeof(typename C::StrideC)));
      vc_ = cutlass::make_cute_packed_stride(typename C::StrideC{}, make_shape(1, static_cast<int>(sh.ldd), 1));
    }
    if constexpr (kRowScale) ps_ = static_cast<const float**>(take(g * sizeof(void*)));
    // Packed strides with the given leading dimensions (the batch extent is 1).
    va_ = cutlass::make_cute_packed_stride(typename C::StrideA{}, make_shape(1, static_cast<int>(sh.lda), 1));
    vb_ = cutlass::make_cute_packed_stride(typename C::StrideB{}, make_shape(static_cast<int>(sh.n),
                                                                             static_cast<int>(sh.k), 1));
    vd_ = cutlass::make_cute_packed_stride(typename C::StrideD{}, make_shape(1, static_cast<int>(sh.ldd), 1));
    const cutlass::KernelHardwareInfo hw = current_device_hw_info<typename C::Kernel>();
    typename C::Gemm::Arguments args;
    decltype(args.epilogue.thread) fusion{};
    if constexpr (kKind == EpilogueKind::kPlain) set_plain_epilogue(fusion);
    if constexpr (kRowScale)  // {AccFetch, ColBroadcast, multiplies}: the per-group scale pointers
      fusion = decltype(fusion){{}, {ps_, 0.f, RowScaleStride{_1{}, _0{}, int64_t{0}}}, {}};
    if constexpr (kSwiglu7)
      args = typename C::Gemm::Arguments{cutlass::gemm::GemmUniversalMode::kGrouped,
                                         {groups_, shapes_, nullptr},
                                         {pa_, sa_, pb_, sb_},
                                         {fusion, pc_, sc_, pd_, sd_},
                                         hw};
    else
      args = typename C::Gemm::Arguments{cutlass::gemm::GemmUniversalMode::kGrouped,
                                         {groups_, shapes_, nullptr},
                                         {pa_, sa_, pb_, sb_},
                                         {fusion, nullptr, nullptr, pd_, sd_},
                                         hw};
    MAGI2_CHECK(gemm_.can_implement(args) == cutlass::Status::kSuccess, "expert GEMM: CUTLASS cannot run n ", sh.n,
                ", k ", sh.k);
    const size_t ws = C::Gemm::get_workspace_size(args);
    void* wsp = ws > 0 ? take(ws) : nullptr;
    MAGI2_CHECK(gemm_.initialize(args, wsp) == cutlass::Status::kSuccess, "expert GEMM: CUTLASS initialisation failed");
  }

  void run(const int32_t* offsets, const void* a, const void* const* b, void* d, cudaStream_t s,
           const float* row_scale) override {
    MAGI2_CHECK(kRowScale == (row_scale != nullptr), "expert GEMM: a row scale is ",
                kRowScale ? "required" : "not taken", " by this epilogue");
    const int threads = 256;
    fill_groups<C, ElementD><<<(groups_ + threads - 1) / threads, threads, 0, s>>>(
        offsets, sh_.experts, sh_.parts, static_cast<int>(sh_.n), static_cast<int>(sh_.k), sh_.lda, sh_.ldd,
        static_cast<const cutlass::bfloat16_t*>(a), static_cast<const cutlass::bfloat16_t*>(b[0]),
        static_cast<const cutlass::bfloat16_t*>(sh_.parts > 1 ? b[1] : b[0]), static_cast<ElementD*>(d), shapes_,
        pa_, pb_, pd_, sa_, sb_, sd_, va_, vb_, vd_, pc_, sc_, vc_, row_scale, ps_);
    MAGI2_CUDA_CHECK_LAUNCH("expert GEMM arrays");
    MAGI2_CHECK(gemm_.run(s) == cutlass::Status::kSuccess, "expert GEMM: CUTLASS launch failed");
    MAGI2_CUDA_CHECK_LAUNCH("expert GEMM");
  }

 private:
  ExpertGemmShape sh_;
  int groups_ = 0;
  std::vector<std::shared_ptr<void>> blocks_;
  typename C::Shape3* shapes_ = nullptr;
  const cutlass::bfloat16_t** pa_ = nullptr;
  const cutlass::bfloat16_t** pb_ = nullptr;
  ElementD** pd_ = nullptr;
  typename C::StrideA* sa_ = nullptr;
  typename C::StrideB* sb_ = nullptr;
  typename C::StrideD* sd_ = nullptr;
  typename C::StrideA va_{};
  typename C::StrideB vb_{};
  typename C::StrideD vd_{};
  const cutlass::bfloat16_t** pc_ = nullptr;  // the SwiGLU7 epilogue's C (the up values)
  typename C::StrideC* sc_ = nullptr;
  typename C::StrideC vc_{};
  const float** ps_ = nullptr;  // the row-scale epilogue's per-group scale pointers
  typename C::Gemm gemm_;
};

}  // namespace magi2::cuda::moe_gemm
