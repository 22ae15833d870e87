// One transformer layer (spec magi2-dit.md §5 Layer_l): mHC around an
// attention branch (§6) and an MLP branch: dense SwiGLU7 (§7) or multi-head MoE (§8).
#include <cmath>
#include <cstring>
#include <string>

#include "core/error.h"
#include "models/magi2_dit/dit.h"
#include "models/magi2_dit/workspace.h"
#include "ops/numerics.h"

namespace magi2 {

namespace {
// Columns [c0, c1) of FP8 rows (both multiples of 128), or none when a bound is
// not or the rows are absent: the linear then quantises its input itself.
Fp8Rows fp8_cols(const Fp8Rows& a, int64_t c0, int64_t c1) {
  if (!a.defined() || c0 % kFp8ActGroup != 0 || c1 % kFp8ActGroup != 0) return {};
  return {a.q.slice_cols(c0, c1), a.scale.slice_cols(c0 / kFp8ActGroup, c1 / kFp8ActGroup)};
}
}  // namespace

void Dit::layer(int l, const DitRunOptions& opt) {
  DitWorkspace& ws = *ws_;
  const DitLayerWeights& L = w_.layers[l];
  const std::string p = str_cat("l", l, "_");
  const Groups& gm = L.mm ? ws.groups3 : ws.groups1;
  // c = 1/sqrt(4D) formed in double and applied as fp32 (spec §9.1).
  const float c = static_cast<float>(1.0 / std::sqrt(static_cast<double>(arch_.virtual_width())));
  const bool want = static_cast<bool>(opt.dump);

  // One mHC-wrapped branch (spec §9): logits from the state before the branch,
  // branch input from H_pre, then H_post/H_res fold the branch output back in.
  // The post + residual also forms the next branch's logits of the new state
  // (`next`: this layer's MLP branch, then the next layer's attention branch;
  // a backend may do so in the same pass, one state read less), and leaves the
  // new rows' sums of squares for a next mhc_logits (a backend may use them
  // instead of a second read). The branch's pre-norm (norm_w over groups ng;
  // with FP8 linears also xn's FP8 rows, which the FP8 linears reading xn take
  // instead of quantising xn again) runs inside mhc_pre: the body starts from
  // ws.xn, and the branch input itself is kept only for a dump.
  auto branch = [&](const std::string& name, const Tensor& phi, const MhcBranchWeights& mw, const Tensor& norm_w,
                    const Groups& ng, const MhcLogitsParams& next, auto&& body) {
    be_.mark("mhc");
    if (!ws.logits_fresh)
      be_.mhc_logits({.state = ws.state, .norm_w = L.mhc_norm, .phi = phi, .logits = ws.logits, .groups = gm,
                      .ss = ws.ss_fresh ? ws.ss : Tensor()});
    be_.mhc_pre({.state = ws.state, .logits = ws.logits, .w = &mw, .a = want ? ws.branch_in : Tensor(),
                 .h_pre = ws.h_pre, .c = c, .norm = {.w = norm_w, .y = ws.xn, .groups = ng, .y8 = ws.xn8}});
    if (want) dump(opt, p + name + "_in", ws.branch_in);
    body();
    if (want) dump(opt, p + name + "_out", ws.branch_out);
    be_.mark("mhc");
    be_.mhc_post_res({.state = ws.state, .o = ws.branch_out, .logits = ws.logits, .w = &mw,
                      .h_post = ws.h_post, .h_res = ws.h_res, .c = c, .ss = ws.ss, .next = next});
    ws.ss_fresh = true;
    ws.logits_fresh = next.logits.defined();
    if (want) {
      dump(opt, p + "h_post_" + name, ws.h_post);
      dump(opt, p + "h_res_" + name, ws.h_res);
    }
  };
  // The next layer's weights are resident here only without --offload (its copy is awaited in before_layer).
  MhcLogitsParams after_mlp;
  if (l + 1 < arch_.num_layers && !offload_) {
    const DitLayerWeights& N = w_.layers[l + 1];
    after_mlp = {.norm_w = N.mhc_norm, .phi = N.phi_attn, .logits = ws.logits,
                 .groups = N.mm ? ws.groups3 : ws.groups1};
  }
  branch("attn", L.phi_attn, L.mhc_attn, L.attn_pre_norm, gm,
         MhcLogitsParams{.norm_w = L.mhc_norm, .phi = L.phi_mlp, .logits = ws.logits, .groups = gm},
         [&] { attention(l, ws.branch_out); });
  branch("mlp", L.phi_mlp, L.mhc_mlp, L.mlp_pre_norm, ws.groups3, after_mlp, [&] {
    if (L.moe)
      moe(l, ws.branch_out, opt);
    else
      dense_mlp(l, ws.branch_out);
  });
  if (want) dump(opt, p + "out", ws.state);
}

void Dit::attention(int l, const Tensor& out) {
  DitWorkspace& ws = *ws_;
  const DitLayerWeights& L = w_.layers[l];
  const Groups& g = L.mm ? ws.groups3 : ws.groups1;
  const int64_t n = ws.n, d = arch_.hidden_size, hd = arch_.head_dim;

  be_.mark("attn.proj");
  be_.linear({.x = ws.xn, .w = L.linear_g, .y = ws.g, .groups = g});
  be_.linear({.x = ws.xn, .w = L.linear_qkv, .y = ws.qkv, .groups = g, .w_scale = L.linear_qkv_scale,
              .x8 = ws.xn8});
  be_.mark("attn.glue");
  // Per-head q/k RMSNorm, RoPE and the un-permute to token order, v gathered (spec §6 steps 4-6).
  be_.attn_qkv({.qkv = ws.qkv, .q_norm = L.q_norm, .k_norm = L.k_norm, .table = ws.rope, .src_rows = ws.inv,
                .q = ws.q, .k = ws.k, .v = ws.v, .groups = g, .fp8 = w_.fp8_attention, .cu_seqlens = ws.cu_seqlens});
  // The core writes the FA3 output and its log-sum-exp; the sink, the output gate and the permute back
  // to modality order follow in one op (spec §6 steps 7-9).
  // FP8 experts (W8A16): this layer's banks are dequantised on a few SMs beside the attention core.
  if (L.moe)
    be_.moe_prefetch({.w_gate = L.w_gate, .w_up = L.w_up, .w_down = L.w_down, .w_gate_scale = L.w_gate_scale,
                      .w_up_scale = L.w_up_scale, .w_down_scale = L.w_down_scale, .fp8_compute = w_.fp8_compute,
                      .bank_layout = L.bank_layout});
  be_.mark("attn.core");
  be_.attention({.q = ws.q, .k = ws.k, .v = ws.v, .sinks = L.sinks, .o = ws.o, .cu_seqlens = ws.cu_seqlens,
                 .max_seqlen = ws.max_seqlen,
                 .scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd))), .lse = ws.lse,
                 .fp8 = w_.fp8_attention, .fp8_from_qkv = w_.fp8_attention});
  be_.mark("attn.glue");
  // xn8 is free once the qkv linear has read it: it carries o_p's FP8 rows to the projection.
  be_.attn_out({.o = ws.o, .lse = ws.lse, .sinks = L.sinks, .g = ws.g, .src_rows = ws.perm, .out = ws.o_p,
                .out8 = ws.xn8});
  be_.mark("attn.proj");
  be_.linear({.x = ws.o_p.reshape({n, d}), .w = L.linear_proj, .y = out, .groups = g, .w_scale = L.linear_proj_scale,
              .x8 = ws.xn8});
}

void Dit::dense_mlp(int l, const Tensor& out) {
  DitWorkspace& ws = *ws_;
  const DitLayerWeights& L = w_.layers[l];
  be_.mark("dense_mlp");
  be_.linear({.x = ws.xn, .w = L.up_gate_proj, .y = ws.u, .groups = ws.groups3, .w_scale = L.up_gate_proj_scale,
              .x8 = ws.xn8});
  be_.swiglu7({.u = ws.u, .z = ws.z});
  be_.linear({.x = ws.z, .w = L.down_proj, .y = out, .groups = ws.groups3, .w_scale = L.down_proj_scale});
}

void Dit::moe(int l, const Tensor& out, const DitRunOptions& opt) {
  DitWorkspace& ws = *ws_;
  const DitLayerWeights& L = w_.layers[l];
  const int64_t n = ws.n;
  const int mh = arch_.moe_num_heads, ne = arch_.moe_num_experts, k = arch_.moe_top_k;
  const int64_t ish = arch_.moe_shared_expert_intermediate_size;
  const int64_t im = arch_.moe_modality_specific_expert_intermediate_size;
  const std::string p = str_cat("l", l, "_");

  be_.mark("moe.split_merge");
  be_.linear({.x = ws.xn, .w = L.split_linear, .y = ws.r, .groups = ws.groups1, .w_scale = L.split_linear_scale,
              .x8 = ws.xn8});
  if (opt.dump) dump(opt, p + "moe_x_heads", ws.r);

  // Shared + modality-specific shared experts (spec §8.1): SwiGLU7 pairs never
  // cross the boundary between the two fc1 outputs. They run before the routed
  // experts (independent ops, the same bytes in either order) so that the FP8
  // rows of xn, then of sz, then of routed can share one buffer (ws.xn8).
  be_.mark("moe.shared_experts");
  be_.linear({.x = ws.xn, .w = L.shared_fc1, .y = ws.su.slice_cols(0, 2 * ish), .groups = ws.groups1,
              .w_scale = L.shared_fc1_scale, .x8 = ws.xn8});
  be_.linear({.x = ws.xn, .w = L.msh_fc1, .y = ws.su.slice_cols(2 * ish, 2 * ish + 2 * im), .groups = ws.groups3,
              .w_scale = L.msh_fc1_scale, .x8 = ws.xn8});
  be_.swiglu7({.u = ws.su, .z = ws.sz, .z8 = ws.sz8});
  be_.linear({.x = ws.sz.slice_cols(0, ish), .w = L.shared_fc2, .y = ws.s2, .groups = ws.groups1,
              .w_scale = L.shared_fc2_scale, .x8 = fp8_cols(ws.sz8, 0, ish)});
  be_.linear({.x = ws.sz.slice_cols(ish, ish + im), .w = L.msh_fc2, .y = ws.m2, .groups = ws.groups3,
              .w_scale = L.msh_fc2_scale, .x8 = fp8_cols(ws.sz8, ish, ish + im)});
  // s2 + m2 is added to the merged output in the MoE's last op (one pass for both sums).

  Tensor forced;
  if (l < static_cast<int>(opt.forced_topk.size()) && opt.forced_topk[l].defined()) {
    check_tensor(opt.forced_topk[l], {mh, n, k}, DType::I32, str_cat("forced routing of layer ", l));
    const Tensor f = to_backend(be_, opt.forced_topk[l]);
    // Forced selections come in original token order; the MoE runs permuted.
    for (int h = 0; h < mh; ++h)
      be_.gather_rows({.src = f.slice_rows(h, h + 1).reshape({n, k}),
                       .dst = ws.forced.slice_rows(h, h + 1).reshape({n, k}),
                       .index = ws.perm});
    forced = ws.forced;
  }
  be_.mark("moe.router");
  be_.moe_route({.r = ws.r, .gate = L.router_gate, .bias = w_.selection_bias(l), .idx = ws.topk_idx,
                 .weight = ws.topk_w, .forced_idx = forced, .margin = opt.dump ? ws.margin : Tensor(),
                 .num_heads = mh, .num_experts = ne, .top_k = k,
                 .route_scale = static_cast<float>(arch_.moe_route_scale), .normalize = arch_.moe_route_norm});
  if (opt.dump) {
    Tensor idx_o = Tensor::zeros({mh, n, k}, DType::I32), mg_o = Tensor::zeros({mh, n}, DType::F32);
    for (int h = 0; h < mh; ++h) {
      const Tensor ih = unpermute(ws.topk_idx.slice_rows(h, h + 1).reshape({n, k}));
      const Tensor mgh = unpermute(ws.margin.slice_rows(h, h + 1).reshape({n, 1}));
      std::memcpy(idx_o.data_as<int32_t>() + h * n * k, ih.data(), ih.nbytes());
      std::memcpy(mg_o.data_as<float>() + h * n, mgh.data(), mgh.nbytes());
    }
    opt.dump(p + "moe_topk_idx", idx_o);
    opt.dump(p + "moe_margin", mg_o);
  }
  be_.mark("moe.routed_experts");
  be_.moe_experts({.r = ws.r, .w_gate = L.w_gate, .w_up = L.w_up, .w_down = L.w_down,
                   .w_gate_scale = L.w_gate_scale, .w_up_scale = L.w_up_scale, .w_down_scale = L.w_down_scale,
                   .idx = ws.topk_idx,
                   .weight = ws.topk_w, .out = ws.routed, .num_heads = mh, .num_experts = ne, .top_k = k,
                   .fp8_compute = w_.fp8_compute, .bank_layout = L.bank_layout, .out8 = ws.xn8});
  be_.mark("moe.split_merge");
  be_.linear({.x = ws.routed, .w = L.merge_linear, .y = ws.merged, .groups = ws.groups1,
              .w_scale = L.merge_linear_scale, .x8 = ws.xn8});

  // out = bf16(merged + bf16(s2 + m2)): the shared experts' sum, then the routed part (spec §8).
  be_.add({.a = ws.merged, .b = ws.s2, .out = out, .c = ws.m2});
}

}  // namespace magi2
