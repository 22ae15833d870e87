// Entry points of the CUDA mHC (spec magi2-dit.md §9) and multi-head MoE
// (§8.2-8.4) kernels. Host-only header (no device code): backend_cuda.cpp
// includes it with the plain C++ compiler. Each function checks shapes,
// enqueues its kernels on `s` and returns without waiting; every tensor
// (weights and scalars included) lives on the device. Bytes equal the CPU
// backend's (src/cpu/mhc.cpp, src/cpu/moe.cpp) on valid input (docs/cuda.md).
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <memory>

#include "cuda/fused_kernels.h"
#include "cuda/moe_gemm.h"
#include "ops/backend_options.h"
#include "ops/ops.h"

namespace magi2::cuda {

// Each of the next four checks its params, then runs the opt-in fast kernel
// when `fast` selects its family and the shape suits it (fused_kernels.h),
// else the reference kernel.

/// MhcLogitsParams on the device (one block per token). mhc.cu.
void mhc_logits(const MhcLogitsParams& p, cudaStream_t s, const FusedPaths* fast = nullptr);
/// MhcPreParams on the device; alpha/bias are read on the device. mhc.cu.
void mhc_pre(const MhcPreParams& p, cudaStream_t s, const FusedPaths* fast = nullptr);
/// MhcPostResParams on the device (Sinkhorn per token, then the in-place state update). mhc.cu.
void mhc_post_res(const MhcPostResParams& p, cudaStream_t s, const FusedPaths* fast = nullptr);
/// MoeRouteParams on the device. Out-of-range forced indices are clamped to
/// [0, E) without the CPU backend's error (checking them would need a host sync). moe.cu.
void moe_route(const MoeRouteParams& p, cudaStream_t s, const FusedPaths* fast = nullptr);
/// Routed experts as grouped GEMMs on tensor cores (moe_grouped.cu): a
/// deterministic counting sort of the routes by flat expert, the W13 and W2
/// CUTLASS grouped GEMMs with device-side problem shapes, SwiGLU7 and the
/// combine in ascending expert id. Owns its workspace (sort arrays, the routed
/// rows [R, DH] bf16, the W13 output [R, 2 DE] bf16, the W2 output [R, DH]
/// fp32 with R = T x MH x K), planned on the first call per shape; planning
/// during graph capture is refused with a clear error. Within bf16 tolerance
/// of the CPU reference (not bit-equal), bit-identical run to run.
/// A call of more than `max_rows` routed rows runs in equal token passes that
/// reuse one pass's workspace; the output bytes do not depend on the number of
/// passes (each row's GEMMs and each token's combine are independent of the
/// other rows).
class MoeExpertsRunner {
 public:
  /// Which W13 runs: kGrouped, the CUTLASS W13 grouped GEMM (gate and up)
  /// then a separate SwiGLU7 pass; kEpilogue, the up GEMM then the gate GEMM
  /// with SwiGLU7 in its epilogue (the gate never written), and W2 with the
  /// routing weight in its epilogue (bf16 out: half the bytes for the combine),
  /// the same bytes as kGrouped; kFused, where it applies (bf16 banks or FP8
  /// banks dequantised to bf16, d_head 256, d_expert a multiple of 64, aligned
  /// rows), the whole expert in one kernel (moe_expert_fused.h: gather, W13,
  /// SwiGLU7, W2 and the weight), else (W8A8, other widths) kEpilogue. kFromEnv: MAGI2_MOE_KERNEL = reference (kGrouped),
  /// epilogue or fused; unset: w13_kernel_default().
  enum class W13Kernel { kFromEnv, kFused, kGrouped, kEpilogue };
  /// What kFromEnv gives without MAGI2_MOE_KERNEL.
  static W13Kernel w13_kernel_default();
  explicit MoeExpertsRunner(DeviceAlloc alloc, int64_t max_rows = CudaOptions::kDefaultMoeMaxRows,
                            W13Kernel w13 = W13Kernel::kFromEnv);
  ~MoeExpertsRunner();
  MoeExpertsRunner(const MoeExpertsRunner&) = delete;
  MoeExpertsRunner& operator=(const MoeExpertsRunner&) = delete;
  /// Whether the grouped path handles these widths (multiples of 8, top-k <= 32, CUTLASS built in).
  static bool supports(int64_t dh, int64_t de, int k);
  /// Plans the workspace for a call of t tokens now (outside capture); run()
  /// does it when needed. `fused`: the call runs the fused expert kernel
  /// (no gathered rows, no W13 output buffer; a bf16 y), else the GEMM path's buffers.
  void plan(int64_t t, int mh, int ne, int k, int64_t dh, int64_t de, bool fused, cudaStream_t s);
  /// Tokens of one pass for a call of t tokens (t itself when t x mh x k <= max_rows).
  int64_t pass_tokens(int64_t t, int mh, int k) const;
  /// Enqueues the routed experts of checked params on `s`. `mark(i)` (optional,
  /// for benchmarks) is called after stage i is enqueued: 0 sort + gather,
  /// 1 W13, 2 SwiGLU7, 3 W2, 4 combine (with the fused kernel, stage 1 holds
  /// the FP8 dequantisation, the gather, W13, SwiGLU7 and W2, and stages 2 and
  /// 3 are empty; with the SwiGLU7 epilogue stage 1 holds both W13 GEMMs and
  /// stage 2 is empty).
  void run(const MoeExpertsParams& p, cudaStream_t s, const std::function<void(int)>& mark = {});
  /// Backend::moe_prefetch: for FP8 banks that run() will dequantise for the
  /// fused kernel (W8A16), enqueues the dequantisation of all three banks now
  /// on a side stream that forks from `s` and runs on a few SMs beside the work
  /// enqueued on `s` next (the attention branch); run() with the same banks
  /// joins it instead of dequantising. Anything else: nothing. A prefetch must
  /// be followed by a run() on `s` before a graph capture ends (the join).
  /// `by_default`: whether it runs when MAGI2_FP8_PREFETCH is unset; =0 turns
  /// it off, =1 on (off: run() dequantises inline).
  /// Errors: the first call during a graph capture (no buffers yet).
  void prefetch(const MoeExpertsParams& p, cudaStream_t s, bool by_default = true);

 private:
  struct Plan;
  struct Pass;
  void run_pass(const Pass& ps, cudaStream_t s, const std::function<void(int)>& mark);
  W13Kernel w13_kernel() const;  // w13_, or MAGI2_MOE_KERNEL's choice for kFromEnv
  // The FP8 banks dequantised to bf16 (W8A16): at least `banks` bank-sized slots (made outside capture).
  uint16_t* dequant_buffer(int banks, int64_t bank_elems, cudaStream_t s);
  DeviceAlloc alloc_;
  int64_t max_rows_ = 0;
  W13Kernel w13_ = W13Kernel::kFromEnv;
  std::unique_ptr<Plan> plan_;
  std::shared_ptr<void> wdq_;  // FP8 banks dequantised to bf16: wdq_banks_ banks of wdq_bank_elems_ elements
  int wdq_banks_ = 0;
  int64_t wdq_bank_elems_ = 0;
  // The prefetch's side stream and its fork / ready events (made on the first prefetch), and which
  // banks (w_gate's data) a prefetch has enqueued into wdq_ that no run() has joined yet.
  struct Side;
  std::unique_ptr<Side> side_;
  const void* prefetched_ = nullptr;
};

/// MoeExpertsParams on the device: through `grouped` when it supports the
/// widths, else the scalar kernel that reproduces the CPU bit for bit (also
/// the path with grouped = nullptr). A route whose expert index is outside
/// [0, E) contributes nothing (the CPU backend throws instead; no host sync here). moe.cu.
void moe_experts(const MoeExpertsParams& p, MoeExpertsRunner* grouped, cudaStream_t s);

}  // namespace magi2::cuda
