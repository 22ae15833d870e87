#include "pipeline/generate.h"

#include <chrono>
#include <cmath>

#include "core/error.h"
#include "pipeline/denoise_loop.h"
#include "pipeline/flow_unipc.h"
#include "pipeline/noise.h"

namespace magi2 {

LatentShape latent_shape_for_clip(double seconds, int64_t width_px, int64_t height_px, double fps) {
  MAGI2_CHECK(std::isfinite(seconds) && seconds > 0, "--seconds must be > 0, got ", seconds);
  MAGI2_CHECK(width_px > 0 && height_px > 0 && width_px % 16 == 0 && height_px % 16 == 0,
              "video size ", width_px, "x", height_px, " must be positive multiples of 16 pixels");
  const int64_t video_frames = std::llround(seconds * fps * 2.0);
  const int64_t audio_frames = std::llround(seconds * 25.0);
  MAGI2_CHECK(video_frames >= 1 && audio_frames >= 1, "--seconds ", seconds, " is too short for one frame");
  LatentShape s;
  s.frames = (video_frames - 1) / 8 + 1;
  s.height = height_px / 16;
  s.width = width_px / 16;
  s.audio_frames = audio_frames;
  return s;
}

namespace {

Tensor drop_batch(const Tensor& t, int64_t rank_without_batch) {
  if (t.dim() == rank_without_batch + 1 && t.size(0) == 1) {
    Shape s(t.shape().begin() + 1, t.shape().end());
    return t.to(DType::F32).reshape(s);
  }
  return t.to(DType::F32);
}

}  // namespace

GenerateResult generate_latents(Dit& dit, const GenerateRequest& req) {
  const DitArch& a = dit.arch();
  const LatentShape& ls = req.latent;
  MAGI2_CHECK(req.num_steps >= 1, "number of inference steps must be >= 1, got ", req.num_steps);
  MAGI2_CHECK(ls.channels == a.video_in_channels && ls.audio_channels == a.audio_in_channels,
              "latent channels ", ls.channels, "/", ls.audio_channels, " do not match the DiT (",
              a.video_in_channels, "/", a.audio_in_channels, ")");
  validate_cfg_config(req.cfg);
  MAGI2_CHECK(req.text_cond.defined() && req.text_uncond.defined(), "text features: both the prompt and the "
              "negative-prompt features are required");
  const Tensor tc = drop_batch(req.text_cond, 2), tu = drop_batch(req.text_uncond, 2);
  MAGI2_CHECK(tc.dim() == 2 && tc.size(1) == a.text_in_channels, "text features: expected [L, ",
              a.text_in_channels, "], got ", shape_str(req.text_cond.shape()));
  MAGI2_CHECK(tu.dim() == 2 && tu.size(1) == a.text_in_channels, "negative-prompt text features: expected [L, ",
              a.text_in_channels, "], got ", shape_str(req.text_uncond.shape()));

  PackingShapes shapes;
  shapes.latent = ls;
  shapes.text_channels = a.text_in_channels;
  shapes.text_len_cond = tc.size(0);
  shapes.text_len_uncond = tu.size(0);
  PackingConditioning cond;
  cond.text_cond = req.text_cond;
  cond.text_uncond = req.text_uncond;
  MAGI2_CHECK(req.ref_image_latent.defined() == req.ref_special_token.defined(),
              "I2VA needs both the reference image latent and its special token");
  if (req.ref_image_latent.defined()) {
    const Tensor& ri = req.ref_image_latent;
    MAGI2_CHECK(ri.dim() == 4 && ri.size(0) == a.video_in_channels && ri.size(1) == 1,
                "reference image latent: expected [", a.video_in_channels, ", 1, h, w], got ", shape_str(ri.shape()));
    MAGI2_CHECK(req.ref_special_token.numel() == a.text_in_channels, "reference special token: expected [1, ",
                a.text_in_channels, "], got ", shape_str(req.ref_special_token.shape()));
    shapes.ref_images.push_back({ri.size(2), ri.size(3)});
    cond.ref_image_feat = ri.reshape({1, ri.size(0), 1, ri.size(2), ri.size(3)});
    cond.ref_special_tokens = req.ref_special_token.reshape({1, a.text_in_channels});
  }
  const PackingPlan plan = make_packing_plan(shapes);

  const Shape vshape{1, ls.channels, ls.frames, ls.height, ls.width};
  const Shape ashape{1, ls.audio_frames, ls.audio_channels};
  GenerateResult res;
  res.latent = req.init_latent.defined() ? req.init_latent.to(DType::F32) : randn_philox(vshape, req.seed, kNoiseStreamVideo);
  res.audio_latent = req.init_audio_latent.defined() ? req.init_audio_latent.to(DType::F32)
                                                     : randn_philox(ashape, req.seed, kNoiseStreamAudio);
  check_tensor(res.latent, vshape, DType::F32, "initial video noise");
  check_tensor(res.audio_latent, ashape, DType::F32, "initial audio noise");
  res.tokens = plan.total_tokens;

  FlowUniPC sched;
  sched.set_timesteps(req.num_steps, req.shift);
  const auto& ts = sched.timesteps();

  // Everything per step lives on the DiT's backend (DenoiseLoop); the CUDA
  // backend records step 1 as a graph and replays it. Testing hooks (forced
  // routing, on_step's host latents) keep every step eager.
  DenoiseSetup setup;
  setup.plan = &plan;
  setup.x_static = pack_static_tokens(plan, cond);
  setup.timesteps = ts;
  setup.solver = sched.step_table();
  setup.video_scale = static_cast<float>(req.cfg.video_txt_guidance_scale);
  setup.audio_scale = static_cast<float>(req.cfg.audio_txt_guidance_scale);
  setup.latent = res.latent;
  setup.audio_latent = res.audio_latent;
  DenoiseLoop loop(dit, setup);
  Backend& be = dit.backend();
  const bool eager = !req.routing_override.empty() || static_cast<bool>(req.on_step) || !req.use_graph;

  for (int s = 0; s < req.num_steps; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    DitRunOptions opt;
    if (!req.routing_override.empty()) {
      opt.forced_topk.resize(req.routing_override.size());
      for (size_t l = 0; l < req.routing_override.size(); ++l) {
        const Tensor& r = req.routing_override[l];
        if (!r.defined()) continue;
        MAGI2_CHECK(r.dim() == 4 && r.size(0) == req.num_steps && r.size(2) == plan.total_tokens,
                    "routing override of layer ", l, ": expected [", req.num_steps, ", heads, ", plan.total_tokens,
                    ", k], got ", shape_str(r.shape()));
        opt.forced_topk[l] = r.slice_rows(s, s + 1).reshape({r.size(1), r.size(2), r.size(3)}).to(DType::I32);
      }
    }
    if (eager || s == 0) {
      loop.step(opt);  // step 0 also builds every plan and workspace the graph needs
    } else {
      if (!loop.captured()) loop.capture();
      loop.replay();
    }
    be.synchronize();
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    res.step_ms.push_back(ms);
    bool go = true;
    if (req.on_step) {
      res.latent = loop.latent_host();
      res.audio_latent = loop.audio_latent_host();
      GenerateStep info{s, req.num_steps, ts[s], ms, res.latent, res.audio_latent};
      go = req.on_step(info);
      loop.set_latents(res.latent, res.audio_latent);
    }
    if (go && req.on_progress) go = req.on_progress(s, req.num_steps, ts[s], ms);
    if (!go) {
      res.cancelled = true;
      break;
    }
  }
  res.latent = loop.latent_host();
  res.audio_latent = loop.audio_latent_host();
  const auto [bad_v, bad_a] = loop.first_nonfinite_step();
  MAGI2_CHECK(bad_v < 0 && bad_a < 0, "denoising produced non-finite values in the ",
              bad_v >= 0 ? "video" : "audio", " latent at step ", bad_v >= 0 ? bad_v : bad_a,
              " (of ", req.num_steps, "); nothing was written");
  res.workspace_bytes = dit.workspace_bytes() + loop.bytes();
  return res;
}

}  // namespace magi2
