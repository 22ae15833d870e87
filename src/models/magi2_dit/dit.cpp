// DiT forward driver (spec magi2-dit.md §5): inputs -> pre-adapter -> layers ->
// post-adapter. Per-layer branches live in layer.cpp.
#include "models/magi2_dit/dit.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "models/magi2_dit/adapters.h"
#include "models/magi2_dit/offload.h"
#include "models/magi2_dit/workspace.h"

namespace magi2 {

Dit::Dit(const DitArch& arch, const DitWeights& weights, Backend& backend)
    : arch_(arch), w_(weights), be_(backend) {
  arch_.validate("Dit");
  MAGI2_CHECK(static_cast<int>(w_.layers.size()) == arch_.num_layers, "Dit: weights have ", w_.layers.size(),
              " layers, config says ", arch_.num_layers);
}

Dit::Dit(const DitArch& arch, DitOffload& offload, Backend& backend) : Dit(arch, offload.weights(), backend) {
  offload_ = &offload;
}

Dit::~Dit() = default;

void Dit::validate(const DitInputs& in) const {
  MAGI2_CHECK(in.x.defined() && in.x.dim() == 2 && in.x.dtype() == DType::F32,
              "DiT input x: expected [N, C] f32, got ", shape_str(in.x.shape()));
  const int64_t n = in.x.size(0);
  MAGI2_CHECK(n > 0, "DiT input x: no tokens");
  MAGI2_CHECK(in.x.size(1) >= 1 && in.x.size(1) <= arch_.max_in_channels(), "DiT input x: ", in.x.size(1),
              " channels, expected at most ", arch_.max_in_channels());
  check_tensor(in.coords, {n, 9}, DType::F32, "DiT input coords");
  check_tensor(in.modality, {n}, DType::I32, "DiT input modality");
  check_tensor(in.time_emb, {n, 64}, DType::F32, "DiT input time_emb");
  MAGI2_CHECK(in.cu_seqlens.size() >= 2 && in.cu_seqlens.front() == 0 && in.cu_seqlens.back() == n,
              "DiT input cu_seqlens: must start at 0 and end at N = ", n);
  for (size_t i = 1; i < in.cu_seqlens.size(); ++i)
    MAGI2_CHECK(in.cu_seqlens[i] >= in.cu_seqlens[i - 1], "DiT input cu_seqlens: not non-decreasing");
  MAGI2_CHECK(in.modality.device() == Device::CPU, "DiT input modality: must be a host tensor (the static layout)");
  const int32_t* mod = in.modality.data_as<int32_t>();
  const int64_t need[3] = {arch_.video_in_channels, arch_.audio_in_channels, arch_.text_in_channels};
  for (int64_t i = 0; i < n; ++i) {
    MAGI2_CHECK(mod[i] >= 0 && mod[i] <= 3, "DiT input modality: token ", i, " has modality ", mod[i],
                " (expected 0..3)");
    const int m = mod[i] == 3 ? 2 : mod[i];
    MAGI2_CHECK(in.x.size(1) >= need[m] || m == 2, "DiT input x: ", in.x.size(1),
                " channels cannot hold modality ", m, " features (", need[m], ")");
  }
}

Tensor Dit::unpermute(const Tensor& t) const {
  const int64_t n = ws_->n;
  const int64_t cols = t.numel() / n;
  Tensor src = t.is_contiguous() ? t.reshape({n, cols}) : t;
  Tensor out = be_.alloc({n, src.size(1)}, t.dtype());
  be_.gather_rows({.src = src, .dst = out, .index = ws_->inv});
  return to_host(be_, out);
}

void Dit::dump(const DitRunOptions& opt, const std::string& name, const Tensor& permuted) const {
  if (opt.dump) opt.dump(name, unpermute(permuted));
}

Tensor Dit::stage(const Tensor& t, Tensor& staging) const {
  if (t.device() == be_.device()) return t;
  // Made on the first host input only (an eager call; the denoising loop's
  // inputs live on the backend and never need it): at 540p x alone is 2.4 GB.
  if (!staging.defined() || staging.shape() != t.shape() || staging.dtype() != t.dtype())
    staging = be_.alloc(t.shape(), t.dtype());
  be_.copy({.src = t, .dst = staging});
  return staging;
}

size_t Dit::workspace_bytes() const { return ws_ ? ws_->bytes : 0; }

void Dit::prepare(const DitInputs& in) {
  validate(in);
  const int64_t n = in.x.size(0), c_pad = in.x.size(1);
  if (!ws_ || ws_->n != n || ws_->x_p.size(1) != c_pad)
    ws_ = std::make_unique<DitWorkspace>(arch_, n, c_pad, be_, w_.fp8_linears());
  DitWorkspace& ws = *ws_;
  const int32_t* mod = in.modality.data_as<int32_t>();
  if (ws.perm.defined() && ws.cu_host == in.cu_seqlens && std::equal(mod, mod + n, ws.modality_host.begin())) return;

  // Modality order (spec §3.9): TIME counts as TEXT; a stable counting sort so
  // the permutation is a pure function of the modality vector.
  int64_t count[3] = {0, 0, 0};
  for (int64_t i = 0; i < n; ++i) ++count[mod[i] == 3 ? 2 : mod[i]];
  ws.groups3.count = 3;
  ws.groups3.cu = {0, count[0], count[0] + count[1], n};
  ws.groups1 = Groups::single(n);
  std::vector<int32_t> perm(n, 0), inv(n, 0);
  int64_t next[3] = {0, count[0], count[0] + count[1]};
  for (int64_t i = 0; i < n; ++i) {
    const int m = mod[i] == 3 ? 2 : mod[i];
    perm[next[m]] = static_cast<int32_t>(i);
    inv[i] = static_cast<int32_t>(next[m]);
    ++next[m];
  }
  ws.perm = to_backend(be_, Tensor::from_i32({n}, perm));
  ws.inv = to_backend(be_, Tensor::from_i32({n}, inv));
  ws.cu_seqlens = to_backend(be_, Tensor::from_i32({static_cast<int64_t>(in.cu_seqlens.size())}, in.cu_seqlens));
  ws.max_seqlen = 0;
  for (size_t i = 1; i < in.cu_seqlens.size(); ++i)
    ws.max_seqlen = std::max<int64_t>(ws.max_seqlen, in.cu_seqlens[i] - in.cu_seqlens[i - 1]);
  ws.modality_host.assign(mod, mod + n);
  ws.cu_host = in.cu_seqlens;
}

Tensor Dit::forward(const DitInputs& in, const DitRunOptions& opt) {
  prepare(in);
  DitWorkspace& ws = *ws_;
  const int64_t c_pad = in.x.size(1);

  be_.mark("outside");
  be_.gather_rows({.src = stage(in.x, ws.x_in), .dst = ws.x_p, .index = ws.perm});
  be_.gather_rows({.src = stage(in.time_emb, ws.temb_in), .dst = ws.temb_p, .index = ws.perm});
  be_.rope_table({.coords = stage(in.coords, ws.coords_in), .bands = w_.rope_bands, .out = ws.rope});
  if (opt.dump) opt.dump("rope", to_host(be_, ws.rope));

  // Pre-adapter (spec §3.8): one fp32 linear per modality on its first C_m channels.
  const Tensor* emb_w[3] = {&w_.video_embedder_w, &w_.audio_embedder_w, &w_.text_embedder_w};
  const Tensor* emb_b[3] = {&w_.video_embedder_b, &w_.audio_embedder_b, &w_.text_embedder_b};
  const int64_t chans[3] = {arch_.video_in_channels, arch_.audio_in_channels, arch_.text_in_channels};
  for (int m = 0; m < 3; ++m) {
    // Text rows may be narrower than 5120 only when padding is absent: the
    // packed width bounds what the embedder reads, zeros beyond are implied.
    if (ws.groups3.cu[m] != ws.groups3.cu[m + 1])
      MAGI2_CHECK(c_pad >= chans[m], "DiT input x: ", c_pad, " channels, modality ", m, " needs ", chans[m]);
  }
  pre_adapter(be_, {.x_p = ws.x_p, .y = ws.h0, .groups3 = ws.groups3, .w = {emb_w[0], emb_w[1], emb_w[2]},
                    .b = {emb_b[0], emb_b[1], emb_b[2]}, .chans = {chans[0], chans[1], chans[2]}});
  dump(opt, "pre_adapter_x", ws.h0);
  be_.copy_cols({.src = ws.temb_p, .dst = ws.h0, .col_begin = 0});
  be_.cast({.src = ws.h0, .dst = ws.state});
  ws.ss_fresh = false;  // the first branch's logits sum the state's squares themselves
  ws.logits_fresh = false;
  dump(opt, "block_in", ws.state);

  // --offload layerwise: layer l waits for its slot; its slot refills with layer l + 2 once it is done.
  if (offload_) offload_->begin();
  for (int l = 0; l < arch_.num_layers; ++l) {
    if (offload_) {
      be_.mark("offload.wait");  // the wait for layer l's copy gets its own region in the profiles
      offload_->before_layer(l);
    }
    layer(l, opt);
    if (offload_) offload_->after_layer(l);
  }

  be_.mark("outside");
  // Post-adapter (spec §3.11): fp32 RMSNorm + fp32 linear for video and audio rows.
  post_adapter(be_, {.state = ws.state, .fin = ws.fin, .out_p = ws.out_p, .out = ws.out, .inv = ws.inv,
                     .groups3 = ws.groups3, .norm = {&w_.final_norm_video, &w_.final_norm_audio},
                     .linear = {&w_.final_linear_video, &w_.final_linear_audio}, .chans = {chans[0], chans[1]}});
  return ws.out;
}

}  // namespace magi2
