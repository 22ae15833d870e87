// CPU reference implementations of the op interface (src/ops/ops.h), one
// family per file. Each follows the R0 rounding points of spec magi2-dit.md §12.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "ops/ops.h"

namespace magi2::cpu {

void rms_norm(const RmsNormParams& p);          // norm.cpp
void linear(const LinearParams& p);             // linear.cpp
void linear_fp8(const LinearParams& p);         // linear_fp8.cpp (W8A8: LinearParams::w_scale)
/// y bf16 [R, C] (row-strided ok) -> its Fp8Rows y8 (checked against y's shape
/// on the CPU), the quantisation a later FP8 linear would make of y. linear_fp8.cpp.
void write_fp8_rows(const Tensor& y, const Fp8Rows& y8, const char* what);
void swiglu7(const SwiGLU7Params& p);           // elementwise.cpp
void gather_rows(const GatherRowsParams& p);    // elementwise.cpp
void gate(const GateParams& p);                 // elementwise.cpp
void add(const AddParams& p);                   // elementwise.cpp
void copy_cols(const CopyColsParams& p);        // elementwise.cpp
void cast(const CastParams& p);                 // elementwise.cpp
void copy(const CopyParams& p);                 // elementwise.cpp
void rope_table(const RopeTableParams& p);      // rope.cpp
void rope(const RopeParams& p);                 // rope.cpp
void attention(const AttentionParams& p);       // attention.cpp
/// Checks AttentionParams on the CPU (cu_seqlens spanning [0, T] and sorted, q/k/v/o bf16 [T, H, hd]
/// of one shape, the lse [T, H] f32 or the sinks); returns cu_seqlens. Error naming the bad argument.
std::vector<int32_t> check_attention(const AttentionParams& p);  // attention.cpp
/// AttentionParams::fp8: the FP8 rounding points of the CUDA kernel (attention_fp8.cpp).
void attention_fp8(const AttentionParams& p);
void attn_qkv(const AttnQkvParams& p);          // attn_glue.cpp
void block_sparse_attention(const BlockSparseAttentionParams& p);  // block_sparse_attention.cpp
void attn_out(const AttnOutParams& p);          // attn_glue.cpp

/// The learned-sink factor exp(lse - logaddexp(lse, sink)) of spec §6.1 in
/// fp32 (glibc exp/log1p), shared by attention() and attn_out so that the
/// deferred path gives the same bytes.
inline float sink_factor(float lse, float sink) {
  const float hi = std::max(lse, sink), lo = std::min(lse, sink);
  return std::exp(lse - (hi + std::log1p(std::exp(lo - hi))));
}
void mhc_logits(const MhcLogitsParams& p);      // mhc.cpp
void mhc_pre(const MhcPreParams& p);            // mhc.cpp
void mhc_post_res(const MhcPostResParams& p);   // mhc.cpp
void moe_route(const MoeRouteParams& p);        // moe.cpp
void moe_experts(const MoeExpertsParams& p);    // moe.cpp
/// The W8A8 routed experts (MoeExpertsParams::fp8_compute) on params that
/// moe_experts has checked (FP8 banks, valid expert ids). moe_w8a8.cpp.
void moe_experts_w8a8(const MoeExpertsParams& p);
void conv1d(const Conv1dParams& p);                     // conv1d.cpp
void conv_transpose1d(const ConvTranspose1dParams& p);  // conv1d.cpp
void snake_beta(const SnakeBetaParams& p);              // conv1d.cpp
void conv3d(const Conv3dParams& p);                       // conv.cpp
void activation(const ActivationParams& p);               // video.cpp
void upsample_nearest(const UpsampleNearestParams& p);    // video.cpp
void channels_to_time(const ChannelsToTimeParams& p);     // video.cpp
void unpatchify(const UnpatchifyParams& p);               // video.cpp
void latent_denorm(const LatentDenormParams& p);          // video.cpp
void frames_to_u8(const FramesToU8Params& p);             // video.cpp
void channel_l2_norm(const ChannelL2NormParams& p);      // wan_vae.cpp
void avg_down3d(const AvgDown3dParams& p);               // wan_vae.cpp
void spatial_attention(const SpatialAttentionParams& p); // wan_vae.cpp
void channel_affine(const ChannelAffineParams& p);       // wan_vae.cpp
void causal_conv1d(const CausalConv1dParams& p);         // linear_attention.cpp
void gated_delta_rule(const GatedDeltaRuleParams& p);    // linear_attention.cpp
void gated_rms_norm(const GatedRmsNormParams& p);        // gated.cpp
void sigmoid_mul(const SigmoidMulParams& p);             // gated.cpp
void silu_mul(const SiluMulParams& p);                   // gated.cpp
void rotary(const RotaryParams& p);                      // rotary.cpp
void causal_attention(const CausalAttentionParams& p);   // causal_attention.cpp
void copy_elems(const CopyElemsParams& p);               // sampler.cpp
void fill_rows(const FillRowsParams& p);                 // sampler.cpp
void cfg_combine(const CfgCombineParams& p);             // sampler.cpp
void flow_unipc_step(const FlowUniPCStepParams& p);      // sampler.cpp
void advance_step(const AdvanceStepParams& p);           // sampler.cpp
void nonfinite_check(const NonfiniteCheckParams& p);     // sampler.cpp

}  // namespace magi2::cpu
