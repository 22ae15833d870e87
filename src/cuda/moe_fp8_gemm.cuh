// The CUTLASS configuration of the W8A8 expert-bank grouped GEMM
// (moe_fp8_gemm.h), included by one .cu file per output type: sm90 ptr-array
// grouped GEMM with blockwise scaling (CUTLASS example 68's kernel,
// KernelPtrArrayTmaWarpSpecializedCooperativeFP8Blockwise), 128 x 128 x 128
// tiles, 1 x 2 clusters (the example's configuration; not tuned, not measured),
// e4m3 operands, A row-major (K-major), B column-major (K-major: FP8 wgmma has
// no MN-major B), fp32 accumulation with the scales applied per 128-deep
// K-block, no C operand. Scales: SFA one per row and K-block, K-major
// ([rows, k / 128], as the quantising kernels write it); SFB one per 128 x 128
// block, N-major ([k / 128, n / 128] per expert, the checkpoint's layout of an
// expert bank) or K-major ([n / 128, k / 128]: a linear weight's [out, in] blocks).
// Needs -DNDEBUG and sm_90a.
#pragma once

#include <cutlass/cutlass.h>
#include <cutlass/detail/blockwise_scale_layout.hpp>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/group_array_problem_shape.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/util/packed_stride.hpp>

#include <cute/tensor.hpp>

#include <vector>

#include "core/error.h"
#include "cuda/cuda_common.h"
#include "cuda/cutlass_grouped.cuh"
#include "cuda/moe_fp8_gemm.h"

namespace magi2::cuda::moe_fp8_gemm {

using cute::_0;
using cute::_1;
using cute::_2;
using cute::_128;
using cute::make_shape;

constexpr int kBlock = 128;  // the scale granularity along K (both operands) and along N (B)

template <class ElementD, cute::GMMA::Major kSfbMajor>
struct Config {
  using ProblemShape = cutlass::gemm::GroupProblemShape<cute::Shape<int, int, int>>;
  using ElementA = cutlass::float_e4m3_t;
  using ElementB = cutlass::float_e4m3_t;
  using LayoutA = cutlass::layout::RowMajor;
  using LayoutB = cutlass::layout::ColumnMajor;
  using LayoutD = cutlass::layout::RowMajor;
  static constexpr int kAlignA = 16, kAlignB = 16;
  static constexpr int kAlignD = 128 / cutlass::sizeof_bits<ElementD>::value;
  using ScaleConfig =
      cutlass::detail::Sm90BlockwiseScaleConfig<1, kBlock, kBlock, cute::GMMA::Major::K, kSfbMajor>;
  using LayoutSFA = decltype(ScaleConfig::deduce_layoutSFA());
  using LayoutSFB = decltype(ScaleConfig::deduce_layoutSFB());
  using TileShape = cute::Shape<_128, _128, _128>;
  using ClusterShape = cute::Shape<_1, _2, _1>;
  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutD*, kAlignD, ElementD, LayoutD*,
      kAlignD, cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative,
      cutlass::epilogue::fusion::LinearCombination<ElementD, float, void, float>>::CollectiveOp;
  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementA, cute::tuple<LayoutA*, LayoutSFA*>, kAlignA,
      ElementB, cute::tuple<LayoutB*, LayoutSFB*>, kAlignB, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename CollectiveEpilogue::SharedStorage))>,
      cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperativeFP8Blockwise>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, CollectiveMainloop, CollectiveEpilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  using StrideA = typename Kernel::InternalStrideA;
  using StrideB = typename Kernel::InternalStrideB;
  using StrideD = typename Kernel::InternalStrideD;
  using Shape3 = typename ProblemShape::UnderlyingProblemShape;
};

// The device arrays of one grouped launch (one entry per group).
template <class C, class ElementD>
struct Groups {
  typename C::Shape3* shapes;
  const cutlass::float_e4m3_t** pa;
  const cutlass::float_e4m3_t** pb;
  const float** psfa;
  const float** psfb;
  ElementD** pd;
  typename C::StrideA* sa;
  typename C::StrideB* sb;
  typename C::StrideD* sd;
  typename C::LayoutSFA* lsfa;
  typename C::LayoutSFB* lsfb;
};

// Per-group arrays, filled on the device from the expert offsets (no host sync).
template <class C, class ElementD>
__global__ void fill_fp8_groups(const int32_t* __restrict__ offsets, int experts, int parts, int n, int k,
                                int64_t lda, int64_t ldd, const cutlass::float_e4m3_t* a, const float* sfa,
                                const cutlass::float_e4m3_t* b0, const cutlass::float_e4m3_t* b1, const float* sfb0,
                                const float* sfb1, ElementD* d, Groups<C, ElementD> g, typename C::StrideA va,
                                typename C::StrideB vb, typename C::StrideD vd) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= experts * parts) return;
  const int f = i / parts, s = i % parts;
  const int64_t row = offsets[f];
  const int m = offsets[f + 1] - offsets[f];
  const int kb = k / kBlock, nb = n / kBlock;
  g.shapes[i] = make_shape(m, n, k);
  g.pa[i] = a + row * lda;
  g.psfa[i] = sfa + row * kb;
  g.pb[i] = (s == 0 ? b0 : b1) + static_cast<int64_t>(f) * n * k;
  g.psfb[i] = (s == 0 ? sfb0 : sfb1) + static_cast<int64_t>(f) * kb * nb;
  g.pd[i] = d + row * ldd + static_cast<int64_t>(s) * n;
  g.sa[i] = va;
  g.sb[i] = vb;
  g.sd[i] = vd;
  g.lsfa[i] = C::ScaleConfig::tile_atom_to_shape_SFA(make_shape(m, n, k, 1));
  g.lsfb[i] = C::ScaleConfig::tile_atom_to_shape_SFB(make_shape(m, n, k, 1));
}

template <class ElementD, cute::GMMA::Major kSfbMajor = cute::GMMA::Major::MN>
class Runner final : public Fp8ExpertGemm {
  using C = Config<ElementD, kSfbMajor>;

 public:
  Runner(const ExpertGemmShape& sh, const DeviceAlloc& alloc) : sh_(sh) {
    MAGI2_CHECK(sh.experts > 0 && (sh.parts == 1 || sh.parts == 2) && sh.n > 0 && sh.k > 0,
                "W8A8 expert GEMM: bad shape");
    MAGI2_CHECK(sh.n % kBlock == 0 && sh.k % kBlock == 0 && sh.lda % C::kAlignA == 0 && sh.ldd % C::kAlignD == 0,
                "W8A8 expert GEMM: n and k must be multiples of 128 (n ", sh.n, ", k ", sh.k, ")");
    groups_ = sh.experts * sh.parts;
    const size_t n = static_cast<size_t>(groups_);
    auto take = [&](size_t bytes) {
      std::shared_ptr<void> p = alloc((bytes + 255) / 256 * 256);
      blocks_.push_back(p);
      return p.get();
    };
    g_.shapes = static_cast<typename C::Shape3*>(take(n * sizeof(typename C::Shape3)));
    g_.pa = static_cast<const cutlass::float_e4m3_t**>(take(n * sizeof(void*)));
    g_.pb = static_cast<const cutlass::float_e4m3_t**>(take(n * sizeof(void*)));
    g_.psfa = static_cast<const float**>(take(n * sizeof(void*)));
    g_.psfb = static_cast<const float**>(take(n * sizeof(void*)));
    g_.pd = static_cast<ElementD**>(take(n * sizeof(void*)));
    g_.sa = static_cast<typename C::StrideA*>(take(n * sizeof(typename C::StrideA)));
    g_.sb = static_cast<typename C::StrideB*>(take(n * sizeof(typename C::StrideB)));
    g_.sd = static_cast<typename C::StrideD*>(take(n * sizeof(typename C::StrideD)));
    g_.lsfa = static_cast<typename C::LayoutSFA*>(take(n * sizeof(typename C::LayoutSFA)));
    g_.lsfb = static_cast<typename C::LayoutSFB*>(take(n * sizeof(typename C::LayoutSFB)));
    const int ni = static_cast<int>(sh.n), ki = static_cast<int>(sh.k);
    // Packed strides: A rows of lda, B columns of k (K-major), D rows of ldd (the batch extent is 1).
    va_ = cutlass::make_cute_packed_stride(typename C::StrideA{}, make_shape(1, static_cast<int>(sh.lda), 1));
    vb_ = cutlass::make_cute_packed_stride(typename C::StrideB{}, make_shape(ni, ki, 1));
    vd_ = cutlass::make_cute_packed_stride(typename C::StrideD{}, make_shape(1, static_cast<int>(sh.ldd), 1));
    const cutlass::KernelHardwareInfo hw = current_device_hw_info<typename C::Kernel>();
    typename C::Gemm::Arguments args;
    decltype(args.epilogue.thread) fusion;
    set_plain_epilogue(fusion);
    args = typename C::Gemm::Arguments{
        cutlass::gemm::GemmUniversalMode::kGrouped,
        {groups_, g_.shapes, nullptr},
        {reinterpret_cast<const typename C::ElementA**>(g_.pa), g_.sa,
         reinterpret_cast<const typename C::ElementB**>(g_.pb), g_.sb, g_.psfa, g_.lsfa, g_.psfb, g_.lsfb},
        {fusion, nullptr, nullptr, g_.pd, g_.sd},
        hw};
    MAGI2_CHECK(gemm_.can_implement(args) == cutlass::Status::kSuccess, "W8A8 expert GEMM: CUTLASS cannot run n ",
                sh.n, ", k ", sh.k);
    const size_t ws = C::Gemm::get_workspace_size(args);
    void* wsp = ws > 0 ? take(ws) : nullptr;
    MAGI2_CHECK(gemm_.initialize(args, wsp) == cutlass::Status::kSuccess,
                "W8A8 expert GEMM: CUTLASS initialisation failed");
  }

  void run(const int32_t* offsets, const void* a, const float* sa, const void* const* b, const float* const* sb,
           void* d, cudaStream_t s) override {
    const int threads = 256;
    using E = cutlass::float_e4m3_t;
    const int last = sh_.parts > 1 ? 1 : 0;
    fill_fp8_groups<C, ElementD><<<(groups_ + threads - 1) / threads, threads, 0, s>>>(
        offsets, sh_.experts, sh_.parts, static_cast<int>(sh_.n), static_cast<int>(sh_.k), sh_.lda, sh_.ldd,
        static_cast<const E*>(a), sa, static_cast<const E*>(b[0]), static_cast<const E*>(b[last]), sb[0], sb[last],
        static_cast<ElementD*>(d), g_, va_, vb_, vd_);
    MAGI2_CUDA_CHECK_LAUNCH("W8A8 expert GEMM arrays");
    MAGI2_CHECK(gemm_.run(s) == cutlass::Status::kSuccess, "W8A8 expert GEMM: CUTLASS launch failed");
    MAGI2_CUDA_CHECK_LAUNCH("W8A8 expert GEMM");
  }

 private:
  ExpertGemmShape sh_;
  int groups_ = 0;
  std::vector<std::shared_ptr<void>> blocks_;
  Groups<C, ElementD> g_{};
  typename C::StrideA va_{};
  typename C::StrideB vb_{};
  typename C::StrideD vd_{};
  typename C::Gemm gemm_;
};

}  // namespace magi2::cuda::moe_fp8_gemm
