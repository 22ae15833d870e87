// The CPU reference backend: OpenMP over rows, results independent of the
// thread count (each row is computed by one thread in a fixed order).
#include <omp.h>

#include <cstring>

#include "cpu/cpu_common.h"
#include "cpu/cpu_ops.h"
#include "ops/op_checks.h"

namespace magi2 {
namespace cpu {

void check_2d(const Tensor& t, int64_t rows, int64_t cols, const char* what) {
  check_2d_on(Device::CPU, t, rows, cols, what);
}

void check_groups(const Groups& g, int64_t rows, const char* what) { check_row_groups(g, rows, what); }

namespace {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int threads) {
    if (threads > 0) omp_set_num_threads(threads);
  }
  Device device() const override { return Device::CPU; }
  const char* name() const override { return "cpu"; }
  Tensor alloc(const Shape& shape, DType dtype) override { return Tensor::zeros(shape, dtype); }
  void zero(const Tensor& t) override {
    MAGI2_CHECK(t.is_contiguous(), "zero: needs a contiguous tensor");
    std::memset(t.data(), 0, t.nbytes());
  }
  void copy(const CopyParams& p) override { cpu::copy(p); }
  void rms_norm(const RmsNormParams& p) override { cpu::rms_norm(p); }
  void linear(const LinearParams& p) override { cpu::linear(p); }
  void swiglu7(const SwiGLU7Params& p) override { cpu::swiglu7(p); }
  void gather_rows(const GatherRowsParams& p) override { cpu::gather_rows(p); }
  void rope_table(const RopeTableParams& p) override { cpu::rope_table(p); }
  void rope(const RopeParams& p) override { cpu::rope(p); }
  void attention(const AttentionParams& p) override { cpu::attention(p); }
  void attn_qkv(const AttnQkvParams& p) override { cpu::attn_qkv(p); }
  void block_sparse_attention(const BlockSparseAttentionParams& p) override { cpu::block_sparse_attention(p); }
  void attn_out(const AttnOutParams& p) override { cpu::attn_out(p); }
  void gate(const GateParams& p) override { cpu::gate(p); }
  void add(const AddParams& p) override { cpu::add(p); }
  void copy_cols(const CopyColsParams& p) override { cpu::copy_cols(p); }
  void cast(const CastParams& p) override { cpu::cast(p); }
  void mhc_logits(const MhcLogitsParams& p) override { cpu::mhc_logits(p); }
  void mhc_pre(const MhcPreParams& p) override { cpu::mhc_pre(p); }
  void mhc_post_res(const MhcPostResParams& p) override { cpu::mhc_post_res(p); }
  void moe_route(const MoeRouteParams& p) override { cpu::moe_route(p); }
  void moe_experts(const MoeExpertsParams& p) override { cpu::moe_experts(p); }
  void conv1d(const Conv1dParams& p) override { cpu::conv1d(p); }
  void conv_transpose1d(const ConvTranspose1dParams& p) override { cpu::conv_transpose1d(p); }
  void snake_beta(const SnakeBetaParams& p) override { cpu::snake_beta(p); }
  void conv3d(const Conv3dParams& p) override { cpu::conv3d(p); }
  void activation(const ActivationParams& p) override { cpu::activation(p); }
  void upsample_nearest(const UpsampleNearestParams& p) override { cpu::upsample_nearest(p); }
  void channels_to_time(const ChannelsToTimeParams& p) override { cpu::channels_to_time(p); }
  void unpatchify(const UnpatchifyParams& p) override { cpu::unpatchify(p); }
  void latent_denorm(const LatentDenormParams& p) override { cpu::latent_denorm(p); }
  void frames_to_u8(const FramesToU8Params& p) override { cpu::frames_to_u8(p); }
  void channel_l2_norm(const ChannelL2NormParams& p) override { cpu::channel_l2_norm(p); }
  void avg_down3d(const AvgDown3dParams& p) override { cpu::avg_down3d(p); }
  void spatial_attention(const SpatialAttentionParams& p) override { cpu::spatial_attention(p); }
  void channel_affine(const ChannelAffineParams& p) override { cpu::channel_affine(p); }
  // Qwen3.5 text encoder
  void causal_conv1d(const CausalConv1dParams& p) override { cpu::causal_conv1d(p); }
  void gated_delta_rule(const GatedDeltaRuleParams& p) override { cpu::gated_delta_rule(p); }
  void gated_rms_norm(const GatedRmsNormParams& p) override { cpu::gated_rms_norm(p); }
  void rotary(const RotaryParams& p) override { cpu::rotary(p); }
  void causal_attention(const CausalAttentionParams& p) override { cpu::causal_attention(p); }
  void sigmoid_mul(const SigmoidMulParams& p) override { cpu::sigmoid_mul(p); }
  void silu_mul(const SiluMulParams& p) override { cpu::silu_mul(p); }
  // Sampler
  void copy_elems(const CopyElemsParams& p) override { cpu::copy_elems(p); }
  void fill_rows(const FillRowsParams& p) override { cpu::fill_rows(p); }
  void cfg_combine(const CfgCombineParams& p) override { cpu::cfg_combine(p); }
  void flow_unipc_step(const FlowUniPCStepParams& p) override { cpu::flow_unipc_step(p); }
  void advance_step(const AdvanceStepParams& p) override { cpu::advance_step(p); }
  void nonfinite_check(const NonfiniteCheckParams& p) override { cpu::nonfinite_check(p); }
};

}  // namespace
}  // namespace cpu

std::unique_ptr<Backend> make_cpu_backend(int threads) {
  constexpr int kMaxCpuThreads = 1024;  // documented in ops.h
  MAGI2_CHECK(threads >= 0 && threads <= kMaxCpuThreads, "--threads must be in [0, ", kMaxCpuThreads,
              "] (0: all cores), got ", threads);
  return std::make_unique<cpu::CpuBackend>(threads);
}

}  // namespace magi2
