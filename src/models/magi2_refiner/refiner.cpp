#include "models/magi2_refiner/refiner.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "models/magi2_dit/adapters.h"

namespace magi2 {

/// Activations of one layout (packed order = token order; "perm" rows are the
/// modality order the per-modality weights need: video, audio, text). Every
/// buffer has the token count as its first dimension; they are allocated for
/// `cap` tokens and viewed at the current layout's n <= cap, so the two CFG
/// branches (different text lengths) share one allocation instead of freeing
/// and allocating ~100 GB at 1080p in every forward.
class RefinerWorkspace {
 public:
  RefinerWorkspace(const RefinerArch& a, int64_t cap, int64_t c_pad, Backend& be)
      : cap(cap), c_pad(c_pad), d_(a.hidden_size) {
    const int64_t d = a.hidden_size, hd = a.head_dim, hq = a.num_heads_q(), hk = a.num_heads_kv();
    const int64_t im = a.intermediate();
    const DType F = DType::F32, B = DType::BF16;
    auto make = [&](Tensor& view, Shape row, DType dt) {
      row.insert(row.begin(), cap);
      full_.push_back({&view, be.alloc(row, dt)});
    };
    make(x_p, {c_pad}, F);
    make(coords, {9}, F);
    make(rope, {6 * a.rope_bands()}, F);
    make(state, {d}, F);
    make(state_bf, {d}, B);
    make(xn, {d}, B);
    make(qkv, {(hq + 2 * hk) * hd}, B);
    make(g, {hq}, B);
    make(qf, {hq * hd}, F);
    make(kf, {hk * hd}, F);
    make(q, {hq, hd}, B);
    make(k, {hk, hd}, B);
    make(v, {hk, hd}, B);
    make(o, {hq, hd}, B);
    make(o_p, {hq, hd}, B);
    make(branch, {d}, B);
    make(branch_f, {d}, F);
    make(u, {2 * im}, B);
    make(z, {im}, B);
    // The post-adapter's normed rows reuse qf when the widths agree (Hq*hd = D in the release).
    fin_shares_qf_ = hq * hd == d;
    if (!fin_shares_qf_) make(fin, {d}, F);
    make(out_p, {64}, F);
    make(out, {64}, F);
    set_rows(cap);
    be.zero(full_.front().second);  // x_p: load() writes only the columns the pre-adapter reads
  }
  RefinerWorkspace(const RefinerWorkspace&) = delete;
  RefinerWorkspace& operator=(const RefinerWorkspace&) = delete;

  /// Views every buffer at n <= cap tokens (the modality permutation is the caller's to redo).
  void set_rows(int64_t rows) {
    n = rows;
    for (auto& [view, full] : full_) *view = full.slice_rows(0, rows);
    if (fin_shares_qf_) fin = qf.reshape({n, d_});
  }
  int64_t n = 0;
  const int64_t cap, c_pad;
  /// Every distinct allocation, at its full capacity (workspace_bytes).
  std::vector<const Tensor*> all() const {
    std::vector<const Tensor*> list;
    for (const auto& f : full_) list.push_back(&f.second);
    return list;
  }
  Tensor x_p, coords, rope, state, state_bf, xn, qkv, g, qf, kf, q, k, v, o, o_p, branch, branch_f, u, z, fin, out_p, out;
  Tensor perm, inv;  ///< perm[i] = token of modality-order row i; inv[token] = its modality-order row
  Groups groups3, groups1;
  std::vector<int32_t> modality_host, perm_host;

 private:
  int64_t d_;
  bool fin_shares_qf_ = false;
  std::vector<std::pair<Tensor*, Tensor>> full_;  ///< (the view member, its allocation of cap rows)
};

Refiner::Refiner(const RefinerArch& arch, const RefinerWeights& weights, Backend& backend)
    : arch_(arch), w_(weights), be_(backend) {
  arch_.validate("Refiner");
  MAGI2_CHECK(static_cast<int>(w_.layers.size()) == arch_.num_layers, "Refiner: weights have ", w_.layers.size(),
              " layers, config says ", arch_.num_layers);
  MAGI2_CHECK(std::max(arch_.video_in_channels, arch_.audio_in_channels) <= 64,
              "Refiner: video/audio in-channels above 64 are not supported");
}

Refiner::~Refiner() = default;

void Refiner::prepare(const RefinerPlan& plan) {
  const int64_t n = plan.layout.tokens();
  check_tensor(plan.modality, {n}, DType::I32, "refiner plan modality");
  MAGI2_CHECK(plan.c_pad >= std::max({arch_.video_in_channels, arch_.audio_in_channels, arch_.text_in_channels}),
              "refiner plan: packed width ", plan.c_pad, " is below the arch's in-channels");
  if (!ws_ || ws_->cap < n || ws_->c_pad != plan.c_pad) {
    ws_.reset();  // free the old layout's buffers before the new ones are allocated
    ws_ = std::make_unique<RefinerWorkspace>(arch_, n, plan.c_pad, be_);
  } else if (ws_->n != n) {
    ws_->set_rows(n);  // the other CFG branch: same buffers, fewer tokens
  }
  RefinerWorkspace& ws = *ws_;
  const int32_t* mod = plan.modality.data_as<int32_t>();
  if (ws.perm.defined() && ws.modality_host.size() == static_cast<size_t>(n) &&
      std::equal(mod, mod + n, ws.modality_host.begin()))
    return;
  // Stable counting sort by modality: any permutation gives the same per-token
  // results (every op is row-invariant), a stable one makes it reproducible.
  int64_t count[3] = {0, 0, 0};
  for (int64_t i = 0; i < n; ++i) {
    MAGI2_CHECK(mod[i] >= 0 && mod[i] <= 2, "refiner plan modality: token ", i, " has modality ", mod[i]);
    ++count[mod[i]];
  }
  ws.groups3.count = 3;
  ws.groups3.cu = {0, count[0], count[0] + count[1], n};
  ws.groups1 = Groups::single(n);
  std::vector<int32_t> perm(n), inv(n);
  int64_t next[3] = {0, count[0], count[0] + count[1]};
  for (int64_t i = 0; i < n; ++i) {
    perm[next[mod[i]]] = static_cast<int32_t>(i);
    inv[i] = static_cast<int32_t>(next[mod[i]]++);
  }
  ws.perm = to_backend(be_, Tensor::from_i32({n}, perm));
  ws.inv = to_backend(be_, Tensor::from_i32({n}, inv));
  ws.modality_host.assign(mod, mod + n);
  ws.perm_host = std::move(perm);
}

Tensor Refiner::unpermute(const Tensor& t) const {
  const int64_t n = ws_->n;
  const Tensor src = t.is_contiguous() ? t.reshape({n, t.numel() / n}) : t;
  Tensor out = be_.alloc({n, src.size(1)}, t.dtype());
  be_.gather_rows({.src = src, .dst = out, .index = ws_->inv});
  return to_host(be_, out).to(DType::F32);
}

void Refiner::load(const RefinerPlan& plan, const Tensor& x) {
  const int64_t n = plan.layout.tokens();
  check_tensor(x, {n, plan.c_pad}, DType::F32, "refiner input x");
  check_tensor(plan.coords, {n, 9}, DType::F32, "refiner plan coords");
  prepare(plan);
  // Each modality's rows in modality order, the columns the pre-adapter reads.
  const RefinerWorkspace& ws = *ws_;
  const int64_t chans[3] = {arch_.video_in_channels, arch_.audio_in_channels, arch_.text_in_channels};
  Tensor parts[3];
  for (int m = 0; m < 3; ++m) {
    const int64_t r0 = ws.groups3.cu[m], r1 = ws.groups3.cu[m + 1];
    parts[m] = Tensor::empty({r1 - r0, chans[m]}, DType::F32);
    const size_t row = static_cast<size_t>(chans[m]) * sizeof(float);
    for (int64_t j = r0; j < r1; ++j)
      std::memcpy(parts[m].data_as<float>() + (j - r0) * chans[m],
                  x.data_as<float>() + static_cast<int64_t>(ws.perm_host[j]) * plan.c_pad, row);
  }
  load(plan, RefinerInputs{.video = parts[0], .audio = parts[1], .text = parts[2]});
}

void Refiner::load(const RefinerPlan& plan, const RefinerInputs& in) {
  const int64_t n = plan.layout.tokens();
  check_tensor(plan.coords, {n, 9}, DType::F32, "refiner plan coords");
  prepare(plan);
  plan_q_ = plan.q_ranges;
  plan_k_ = plan.k_ranges;
  RefinerWorkspace& ws = *ws_;
  const int64_t chans[3] = {arch_.video_in_channels, arch_.audio_in_channels, arch_.text_in_channels};
  const Tensor* src[3] = {&in.video, &in.audio, &in.text};
  const char* what[3] = {"refiner input video rows", "refiner input audio rows", "refiner input text rows"};
  for (int m = 0; m < 3; ++m) {
    const int64_t r0 = ws.groups3.cu[m], r1 = ws.groups3.cu[m + 1];
    if (r0 == r1 && !src[m]->defined()) continue;  // a modality with no tokens may come as nothing
    check_tensor(*src[m], {r1 - r0, chans[m]}, DType::F32, what[m]);
    if (r0 == r1) continue;
    if (chans[m] == ws.c_pad) {  // whole rows (the text at 1080p): one contiguous upload
      be_.copy({.src = *src[m], .dst = ws.x_p.slice_rows(r0, r1)});
      continue;
    }
    // Narrower rows (the 48-channel video rows in 5120-wide x_p rows): one
    // contiguous upload into out_p, whose rows are dead until post_adapter
    // zeroes and writes them at the end of run(), then a device-side column
    // copy. (A host->device copy straight into the columns would be a pitched
    // copy of 192-byte rows from pageable memory.) The pre-adapter reads only
    // these columns of x_p; the others keep zeros (or an earlier layout's rows).
    MAGI2_CHECK(chans[m] <= ws.out_p.size(1), "refiner: in-channels ", chans[m], " above ", ws.out_p.size(1));
    const Tensor stage = Tensor::view_of(ws.out_p.data_as<float>() + r0 * ws.out_p.size(1), {r1 - r0, chans[m]},
                                         DType::F32, ws.out_p.owner(), ws.out_p.device());
    be_.copy({.src = *src[m], .dst = stage});
    be_.copy_cols({.src = stage, .dst = ws.x_p.slice_rows(r0, r1), .col_begin = 0});
  }
  be_.copy({.src = plan.coords, .dst = ws.coords});
}

void Refiner::run(const RefinerDump& dump) {
  MAGI2_CHECK(ws_, "Refiner::run before Refiner::load");
  RefinerWorkspace& ws = *ws_;
  be_.mark("outside");
  be_.rope_table({.coords = ws.coords, .bands = w_.rope_bands, .out = ws.rope});
  if (dump) dump("rope", to_host(be_, ws.rope));

  // Pre-adapter: one fp32 linear per modality on its first C_m channels.
  const Tensor* emb_w[3] = {&w_.video_embedder_w, &w_.audio_embedder_w, &w_.text_embedder_w};
  const Tensor* emb_b[3] = {&w_.video_embedder_b, &w_.audio_embedder_b, &w_.text_embedder_b};
  const int64_t chans[3] = {arch_.video_in_channels, arch_.audio_in_channels, arch_.text_in_channels};
  pre_adapter(be_, {.x_p = ws.x_p, .y = ws.state, .groups3 = ws.groups3, .w = {emb_w[0], emb_w[1], emb_w[2]},
                    .b = {emb_b[0], emb_b[1], emb_b[2]}, .chans = {chans[0], chans[1], chans[2]}});
  if (dump) dump("pre_adapter_x", unpermute(ws.state));
  // The block runs in params_dtype: the stream starts as bf16 values.
  be_.cast({.src = ws.state, .dst = ws.state_bf});
  be_.cast({.src = ws.state_bf, .dst = ws.state});
  if (dump) dump("block_in", unpermute(ws.state));

  for (int l = 0; l < arch_.num_layers; ++l) layer(l, dump);

  be_.mark("outside");
  // Post-adapter: fp32 RMSNorm + fp32 linear for the video and the audio rows.
  post_adapter(be_, {.state = ws.state, .fin = ws.fin, .out_p = ws.out_p, .out = ws.out, .inv = ws.inv,
                     .groups3 = ws.groups3, .norm = {&w_.final_norm_video, &w_.final_norm_audio},
                     .linear = {&w_.final_linear_video, &w_.final_linear_audio}, .chans = {chans[0], chans[1]}});
}

Tensor Refiner::output() const {
  MAGI2_CHECK(ws_, "Refiner::output before Refiner::load");
  return to_host(be_, ws_->out);
}

void Refiner::release_workspace() {
  ws_.reset();
  plan_q_ = Tensor();
  plan_k_ = Tensor();
}

size_t Refiner::workspace_bytes() const {
  if (!ws_) return 0;
  size_t b = 0;
  for (const Tensor* t : ws_->all()) b += t->nbytes();
  return b;
}

Tensor Refiner::forward(const RefinerPlan& plan, const Tensor& x, const RefinerDump& dump) {
  load(plan, x);
  run(dump);
  return output();
}

void Refiner::layer(int l, const RefinerDump& dump) {
  RefinerWorkspace& ws = *ws_;
  const RefinerLayerWeights& L = w_.layers[l];
  const Groups& g = L.mm ? ws.groups3 : ws.groups1;
  const int64_t n = ws.n, d = arch_.hidden_size, hd = arch_.head_dim;
  const int64_t hq = arch_.num_heads_q(), hk = arch_.num_heads_kv();

  // Attention: bf16 GEMMs on the normalised stream; q/k RMSNorm in fp32, RoPE
  // in fp32, bf16 into the block-window attention, a per-head sigmoid gate.
  be_.mark("attn.proj");
  be_.rms_norm({.x = ws.state, .w = L.attn_pre_norm, .y = ws.xn, .groups = g});
  be_.linear({.x = ws.xn, .w = L.linear_qkv, .y = ws.qkv, .groups = g});
  be_.linear({.x = ws.xn, .w = L.linear_g, .y = ws.g, .groups = g});
  be_.mark("attn.glue");
  be_.rms_norm({.x = ws.qkv.slice_cols(0, hq * hd), .w = L.q_norm, .y = ws.qf, .groups = g, .heads = hq});
  be_.rms_norm({.x = ws.qkv.slice_cols(hq * hd, (hq + hk) * hd), .w = L.k_norm, .y = ws.kf, .groups = g, .heads = hk});
  be_.rope({.x = ws.qf.reshape({n, hq, hd}), .table = ws.rope, .out = ws.q, .src_rows = ws.inv});
  be_.rope({.x = ws.kf.reshape({n, hk, hd}), .table = ws.rope, .out = ws.k, .src_rows = ws.inv});
  be_.gather_rows(
      {.src = ws.qkv.slice_cols((hq + hk) * hd, (hq + 2 * hk) * hd), .dst = ws.v.reshape({n, hk * hd}), .index = ws.inv});
  be_.mark("attn.core");
  be_.block_sparse_attention({.q = ws.q,
                              .k = ws.k,
                              .v = ws.v,
                              .o = ws.o,
                              .q_ranges = plan_q_,
                              .k_ranges = plan_k_,
                              .scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)))});
  be_.mark("attn.glue");
  be_.attn_out({.o = ws.o, .g = ws.g, .src_rows = ws.perm, .out = ws.o_p});
  be_.mark("attn.proj");
  be_.linear({.x = ws.o_p.reshape({n, hq * hd}), .w = L.linear_proj, .y = ws.branch, .groups = g});
  if (dump) dump("l" + std::to_string(l) + "_attn_out", unpermute(ws.branch));
  be_.cast({.src = ws.branch, .dst = ws.branch_f});
  be_.add({.a = ws.state, .b = ws.branch_f, .out = ws.state});
  if (l == 0) {  // the stream is still bf16 here (bf16 + bf16 in the official code)
    be_.cast({.src = ws.state, .dst = ws.state_bf});
    be_.cast({.src = ws.state_bf, .dst = ws.state});
  }

  // MLP: SwiGLU7 between two bf16 GEMMs; the fp32 sum makes the stream fp32 from here on.
  be_.mark("mlp");
  be_.rms_norm({.x = ws.state, .w = L.mlp_pre_norm, .y = ws.xn, .groups = g});
  be_.linear({.x = ws.xn, .w = L.up_gate_proj, .y = ws.u, .groups = g});
  be_.swiglu7({.u = ws.u, .z = ws.z});
  be_.linear({.x = ws.z, .w = L.down_proj, .y = ws.branch, .groups = g});
  be_.cast({.src = ws.branch, .dst = ws.branch_f});
  be_.add({.a = ws.state, .b = ws.branch_f, .out = ws.state});
  if (dump) dump("l" + std::to_string(l) + "_out", unpermute(ws.state));
  (void)d;
}

}  // namespace magi2
