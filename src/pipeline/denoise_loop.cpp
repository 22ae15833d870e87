#include "pipeline/denoise_loop.h"

#include <cstring>
#include <limits>

#include "core/error.h"
#include "pipeline/time_embedding.h"

namespace magi2 {

namespace {

Tensor i32_tensor(const std::vector<int32_t>& v) { return Tensor::from_i32({static_cast<int64_t>(v.size())}, v); }

}  // namespace

Tensor DenoiseLoop::up(const Tensor& host) {
  // Always a fresh buffer (also on the CPU): the loop mutates its state in place.
  Tensor d = be_.alloc(host.shape(), host.dtype());
  be_.copy({.src = host, .dst = d});
  bytes_ += d.nbytes();
  return d;
}

DenoiseLoop::DenoiseLoop(Dit& dit, const DenoiseSetup& s) : dit_(dit), be_(dit.backend()) {
  MAGI2_CHECK(s.plan != nullptr, "denoise loop: no packing plan");
  const PackingPlan& plan = *s.plan;
  const LatentShape& L = plan.shapes.latent;
  const int64_t steps = static_cast<int64_t>(s.timesteps.size());
  MAGI2_CHECK(steps >= 1 && static_cast<int64_t>(s.solver.size()) == steps, "denoise loop: ", steps,
              " timesteps but ", s.solver.size(), " solver rows");
  vshape_ = {1, L.channels, L.frames, L.height, L.width};
  ashape_ = {1, L.audio_frames, L.audio_channels};
  check_tensor(s.latent, vshape_, DType::F32, "initial video noise");
  check_tensor(s.audio_latent, ashape_, DType::F32, "initial audio noise");
  check_tensor(s.x_static, {plan.total_tokens, plan.width}, DType::F32, "packed static tokens");
  video_scale_ = s.video_scale;
  audio_scale_ = s.audio_scale;
  const int64_t nv = L.channels * L.frames * L.height * L.width, na = L.audio_frames * L.audio_channels;
  const int64_t out_cols = dit_.arch().out_channels();

  // Static inputs: the packed tokens (latent rows overwritten every step), the
  // coordinates, and time channels at tau = 0 for the clean rows.
  in_.x = up(s.x_static);
  in_.coords = up(plan.coords);
  in_.modality = plan.modality;
  in_.time_emb = up(pack_time_embedding(plan, static_cast<float>(s.timesteps[0])));
  const int32_t* cu = plan.cu_seqlens.data_as<int32_t>();
  in_.cu_seqlens.assign(cu, cu + plan.cu_seqlens.numel());

  const LatentTokenMaps maps = latent_token_maps(plan, out_cols);
  video_src_ = up(i32_tensor(maps.video_src));
  video_dst_ = up(i32_tensor(maps.video_dst));
  audio_src_ = up(i32_tensor(maps.audio_src));
  audio_dst_ = up(i32_tensor(maps.audio_dst));
  out_video_ = up(i32_tensor(maps.out_video));
  out_audio_ = up(i32_tensor(maps.out_audio));
  noisy_rows_ = up(i32_tensor(maps.noisy_rows));

  // One time embedding per step (spec pipeline §4.5) and one solver row per step.
  Tensor table = Tensor::empty({steps, kTimeChannels}, DType::F32);
  for (int64_t i = 0; i < steps; ++i)
    sinusoidal_embedding(normalize_timestep(static_cast<float>(s.timesteps[static_cast<size_t>(i)])), kTimeChannels,
                         table.data_as<float>() + i * kTimeChannels);
  temb_table_ = up(table);
  Tensor solver = Tensor::empty({steps, 16}, DType::F32);
  std::memcpy(solver.data(), s.solver.data(), s.solver.size() * sizeof(UniPcStepCoef));
  solver_ = up(solver);
  step_ = up(Tensor::from_i32({1}, {0}));
  nonfinite_ = up(Tensor::from_i32({2}, {std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::max()}));

  // Solver state: the samples and their histories (zero before step 0).
  latent_ = up(s.latent.reshape({nv}));
  audio_ = up(s.audio_latent.reshape({na}));
  for (Tensor* t : {&last_v_, &m0_v_, &m1_v_}) *t = up(Tensor::zeros({nv}, DType::F32));
  for (Tensor* t : {&last_a_, &m0_a_, &m1_a_}) *t = up(Tensor::zeros({na}, DType::F32));
  pred_v_ = up(Tensor::zeros({2, nv}, DType::F32));
  pred_a_ = up(Tensor::zeros({2, na}, DType::F32));
  v_v_ = up(Tensor::zeros({nv}, DType::F32));
  v_a_ = up(Tensor::zeros({na}, DType::F32));
  dit_.prepare(in_);
}

size_t DenoiseLoop::planned_bytes(const PackingPlan& plan, int64_t steps, int64_t out_cols) {
  // Mirrors every up() of the constructor, in its order (test_memory_plan
  // checks the two agree).
  const LatentShape& L = plan.shapes.latent;
  const int64_t n = plan.total_tokens;
  const int64_t nv = L.channels * L.frames * L.height * L.width, na = L.audio_frames * L.audio_channels;
  const LatentTokenMaps m = latent_token_maps(plan, out_cols);
  const size_t maps = m.video_src.size() + m.video_dst.size() + m.audio_src.size() + m.audio_dst.size() +
                      m.out_video.size() + m.out_audio.size() + m.noisy_rows.size();
  const int64_t f32 = n * plan.width + plan.coords.numel() + n * kTimeChannels + steps * (kTimeChannels + 16) +
                      nv * (1 + 3 + 2 + 1) + na * (1 + 3 + 2 + 1);
  return 4 * (static_cast<size_t>(f32) + maps + 1 + 2);
}

void DenoiseLoop::step(const DitRunOptions& opt) {
  be_.mark("sampler");
  be_.copy_elems({.src = latent_, .dst = in_.x, .src_index = video_src_, .dst_index = video_dst_});
  be_.copy_elems({.src = audio_, .dst = in_.x, .src_index = audio_src_, .dst_index = audio_dst_});
  be_.fill_rows({.table = temb_table_, .step = step_, .rows = noisy_rows_, .out = in_.time_emb});
  const Tensor out = dit_.forward(in_, opt);
  be_.mark("sampler");
  be_.copy_elems({.src = out, .dst = pred_v_, .src_index = out_video_});
  be_.copy_elems({.src = out, .dst = pred_a_, .src_index = out_audio_});
  be_.cfg_combine({.pred = pred_v_, .v = v_v_, .scale = video_scale_});
  be_.cfg_combine({.pred = pred_a_, .v = v_a_, .scale = audio_scale_});
  be_.flow_unipc_step({.sample = latent_, .v = v_v_, .last = last_v_, .m0 = m0_v_, .m1 = m1_v_, .coef = solver_,
                       .step = step_});
  be_.flow_unipc_step({.sample = audio_, .v = v_a_, .last = last_a_, .m0 = m0_a_, .m1 = m1_a_, .coef = solver_,
                       .step = step_});
  be_.nonfinite_check({.x = latent_, .first = nonfinite_, .step = step_, .slot = 0});
  be_.nonfinite_check({.x = audio_, .first = nonfinite_, .step = step_, .slot = 1});
  be_.advance_step({.step = step_});
}

void DenoiseLoop::capture() {
  graph_ = be_.capture([this] { step(); });
}

void DenoiseLoop::replay() {
  MAGI2_CHECK(graph_ != nullptr, "denoise loop: replay before capture");
  graph_->launch();
}

Tensor DenoiseLoop::latent_host() const { return to_host(be_, latent_).reshape(vshape_); }

Tensor DenoiseLoop::audio_latent_host() const { return to_host(be_, audio_).reshape(ashape_); }

void DenoiseLoop::set_latents(const Tensor& latent, const Tensor& audio_latent) {
  check_tensor(latent, vshape_, DType::F32, "teacher-forced video latent");
  check_tensor(audio_latent, ashape_, DType::F32, "teacher-forced audio latent");
  be_.copy({.src = latent.reshape({latent_.numel()}), .dst = latent_});
  be_.copy({.src = audio_latent.reshape({audio_.numel()}), .dst = audio_});
}

std::pair<int, int> DenoiseLoop::first_nonfinite_step() const {
  const Tensor f = to_host(be_, nonfinite_);
  const int32_t* p = f.data_as<int32_t>();
  auto one = [](int32_t v) { return v == std::numeric_limits<int32_t>::max() ? -1 : static_cast<int>(v); };
  return {one(p[0]), one(p[1])};
}

}  // namespace magi2
