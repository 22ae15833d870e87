// The fast kernels of issue 11 for mHC (spec magi2-dit.md §9) and the router
// (§8.2), selected by MAGI2_MHC_KERNEL and MAGI2_ROUTER_KERNEL (each "fused",
// the default, or "reference"; docs/cuda.md). The routed experts' kernel has
// its own switch (MAGI2_MOE_KERNEL, mhc_moe.h). Host-only header.
//
// - mHC logits: RMSNorm(12288) and the 24 logits of 64 tokens per block on
//   bf16 tensor cores with a three-term bf16 split of (1 + w) * phi
//   (mma_split.cuh): one pass over the state. Within fp32 rounding of the CPU
//   reference (not bit-equal): the reference forms n = (x * rs) * (1 + w) and
//   dots it with phi; this forms rs * sum x ((1 + w) phi).
// - mHC pre and post + residual: the reference kernels' fp32 operations in the
//   same order (bit-equal to the CPU), with 16-byte loads, a warp per token,
//   and the Sinkhorn iterations of 32 tokens run by one warp (a lane each).
// - Router: the [T, 256] x [256, 256] fp32 logits per head on bf16 tensor
//   cores (three-term split of the gate), then the reference's sigmoid,
//   selection order, normalisation and margin in the same kernel (the exact
//   sigmoid only for the few candidates a bounded fast sigmoid leaves:
//   RouteSelect). Selections equal the reference's wherever the selection
//   margin exceeds the logit noise.
//
// The launchers check only what the fast path needs beyond the reference's
// own checks (alignment, widths) and return false when it does not apply;
// the caller then runs the reference kernel.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "cuda/moe_gemm.h"
#include "ops/ops.h"

namespace magi2::cuda {

/// Device scratch for the bf16 splits of the weights, rebuilt by every fused
/// call (a few MB, ~microseconds) so no weight-derived state outlives a call.
/// Grows on demand outside graph capture; inside capture a call that needs
/// more than was planned fails with an Error (run one eager forward first,
/// as for the grouped experts).
class SplitScratch {
 public:
  explicit SplitScratch(DeviceAlloc alloc) : alloc_(std::move(alloc)) {}
  /// At least `bytes` of device memory, valid until the next get(); `what` names the caller in errors.
  void* get(size_t bytes, cudaStream_t s, const char* what);

 private:
  DeviceAlloc alloc_;
  std::shared_ptr<void> buf_;
  size_t bytes_ = 0;
};

/// Which kernels an env switch selects: true = "fused", false = "reference";
/// unset or empty = `fused_default`. Read once per process (the first call's
/// default sticks); any other value is an Error naming the variable. The
/// switches: MAGI2_MHC_KERNEL, MAGI2_ROUTER_KERNEL and MAGI2_SWIGLU7_KERNEL (the
/// SFU sigmoid, cuda_common.h swiglu7; default fused).
/// MAGI2_MOE_KERNEL has three values and its own reader
/// (MoeExpertsRunner::W13Kernel, mhc_moe.h). fused_paths.cpp.
bool fused_selected(const char* env_name, bool fused_default = true);

/// The fused router's selection after its tensor-core logits; both give the
/// same bytes for the same logits (route_fused.cu).
enum class RouteSelect {
  kFiltered,  ///< a fast-sigmoid bound filters each row to a few candidates, ranked exactly, the
              ///< bound on the logits in registers (default; 64, 128, 192 or 256 experts per head,
              ///< else kWarp)
  kWarp,      ///< a warp per row over all its experts (the first fused router; bench and test)
};

/// Which kernel the fused mHC post + residual runs; all give the same bytes
/// (the same fp32 operations in the same order per output; mhc_fused.cu).
enum class MhcPostKernel {
  kLean,  ///< the ring kernel with fewer instructions a step (paired bf16 roundings), 3 slots (default)
  kRing,  ///< the first ring kernel, f32_to_bf16 per value (the NaN test's oracle; bench)
};

class LinearRunner;  // linear.h

/// The fast paths chosen for a backend: which families and the shared scratch.
struct FusedPaths {
  bool mhc = false;     ///< MAGI2_MHC_KERNEL=fused
  bool router = false;  ///< MAGI2_ROUTER_KERNEL=fused
  SplitScratch* scratch = nullptr;
  /// With mhc: the backend's cuBLASLt runner, for the logits as one GEMM where the previous post +
  /// residual handed over the rows' sums of squares (MhcLogitsParams::ss; mhc_logits_gemm.cpp).
  LinearRunner* linear = nullptr;
  RouteSelect router_select = RouteSelect::kFiltered;  ///< with router: which selection
  MhcPostKernel mhc_post = MhcPostKernel::kLean;        ///< with mhc: which post + residual kernel
};

/// mHC logits of checked params (mhc_fused.cu): false when the width is not
/// a multiple of 32 or the state rows are not 16-byte aligned.
bool mhc_logits_fused(const MhcLogitsParams& p, SplitScratch& scratch, cudaStream_t s);
/// mHC logits of checked params with p.ss defined (the post + residual's sums
/// of squares): the 24 logits x 3 bf16 split terms of (w_m + 1) phi as one
/// cuBLASLt GEMM per weight group, bf16 state x bf16 [72, vw] -> fp32
/// (LinearRunner::run_f32_out), then the terms added and scaled by the RMSNorm
/// factor from p.ss. The same products as mhc_logits_fused, summed in
/// cuBLAS's order: within the fused logits' bound of the CPU reference,
/// deterministic. Scratch from fast.scratch (the split weights and the GEMM's
/// output); false when vw is not a multiple of 8 or the state rows are not
/// 16-byte aligned (mhc_logits_gemm.cpp).
bool mhc_logits_gemm(const MhcLogitsParams& p, const FusedPaths& fast, cudaStream_t s);
/// mhc_logits_gemm's device pieces (mhc_fused.cu): the split weights, [groups *
/// 72, vw] bf16 (row sp * 24 + n of group m: split term sp of (w_m + 1) phi[:, n]),
/// and the logits [t, 24] (row stride ldl) from the GEMM's y72 [t, 72] f32 and ss [t].
void mhc_split72(const float* phi, const float* norm_w, int64_t vw, int groups, uint16_t* out, cudaStream_t s);
void mhc_logits_from_split72(const float* y72, const float* ss, int64_t vw, float eps, float* logits, int64_t ldl,
                             int64_t t, cudaStream_t s);
/// mHC branch input of checked params, bit-equal to the reference (mhc_pre.cu),
/// with p.norm.y defined also the pre-norm (a then kept in shared memory, and
/// written only where p.a is defined): the bytes of mhc_pre + rms_norm. False,
/// launching nothing, unless D is a multiple of 8 and the rows are 16-byte
/// aligned, and with the norm its y bf16 and aligned, its gains 16-byte aligned,
/// 8 rows of D bf16 values within 48 KB and y8's tensors contiguous.
bool mhc_pre_fused(const MhcPreParams& p, cudaStream_t s);
/// mHC post + residual of checked params, bit-equal to the reference
/// (mhc_fused.cu): false unless D is a multiple of 8 and rows are 16-byte aligned.
bool mhc_post_res_fused(const MhcPostResParams& p, cudaStream_t s, MhcPostKernel kernel = MhcPostKernel::kLean);
/// mHC post + residual of checked params with p.next.logits defined, and the
/// next branch's logits of the new state in the same pass (mhc_post_logits.cu):
/// the state, h_post and h_res bit-equal to the reference, ss (the new rows'
/// sums of squares) in its own fp32 order, next.logits within mhc_logits_fused's
/// bound of the CPU reference, each token's in an order fixed by D and the
/// process's MAGI2_MHC_POST_PARTS (not by T or the token's place). Scratch from `scratch`; false, launching
/// nothing, unless D is a multiple of 128 and the rows of state and o are
/// 16-byte aligned.
bool mhc_post_logits_fused(const MhcPostResParams& p, SplitScratch& scratch, cudaStream_t s);
/// mHC logits of checked params by mhc_post_logits_fused's pass without the
/// update (mhc_post_logits.cu): for a state that pass wrote, the bytes of the
/// logits it formed (so the DiT's logits do not depend on whether the previous
/// post + residual formed them, e.g. with --offload layerwise); p.ss is not
/// used (the pass sums in its own order). False, launching nothing, unless D =
/// vw / 4 is a multiple of 128 and the state rows are 16-byte aligned.
bool mhc_logits_pass(const MhcLogitsParams& p, SplitScratch& scratch, cudaStream_t s);
/// The fused logits' fragment-native weight units (mma_split.cuh) of
/// (w_m + 1) phi for each weight group m: unit (((m nq + q) 3 + s) 3 + nt) 32 +
/// lane, nq = vw / 32, into `out` of mhc_phi_split_bytes(vw, groups) bytes
/// (mhc_fused.cu; vw a multiple of 32).
size_t mhc_phi_split_bytes(int64_t vw, int groups);
void mhc_phi_split(const float* phi, const float* norm_w, int64_t vw, int groups, uint4* out, cudaStream_t s);
/// Router of checked params (route_fused.cu): false unless d_head is a multiple
/// of 32, the experts per head a multiple of 32 and at most 256, and r's rows 16-byte aligned.
/// `select` picks the selection; both filtered ones run kWarp's when top-k exceeds 7.
bool moe_route_fused(const MoeRouteParams& p, SplitScratch& scratch, cudaStream_t s,
                     RouteSelect select = RouteSelect::kFiltered);

}  // namespace magi2::cuda
