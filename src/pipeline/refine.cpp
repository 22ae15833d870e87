#include "pipeline/refine.h"

#include <chrono>
#include <cmath>

#include "core/error.h"
#include "ops/numerics.h"
#include "pipeline/flow_unipc.h"
#include "pipeline/noise.h"

namespace magi2 {

namespace {

constexpr uint64_t kNoiseStreamRefiner = 0x726566696e65;  // "refine": the re-noise draw

// Source index and weight of output cell i of an n -> m align_corners resample.
void lerp_at(int64_t i, int64_t n, int64_t m, int64_t* i0, int64_t* i1, float* f) {
  const double pos = m > 1 ? static_cast<double>(i) * static_cast<double>(n - 1) / static_cast<double>(m - 1) : 0.0;
  *i0 = std::min<int64_t>(static_cast<int64_t>(std::floor(pos)), n - 1);
  *i1 = std::min<int64_t>(*i0 + 1, n - 1);
  *f = static_cast<float>(pos - static_cast<double>(*i0));
}

Tensor drop_batch(const Tensor& t) {
  if (t.dim() == 3 && t.size(0) == 1) return t.reshape({t.size(1), t.size(2)});
  return t;
}

}  // namespace

Tensor resample_trilinear_align_corners(const Tensor& x_in, int64_t t, int64_t h, int64_t w) {
  MAGI2_CHECK(x_in.dim() == 5 && x_in.size(0) == 1, "refiner resample: expected [1, C, T, H, W], got ",
              shape_str(x_in.shape()));
  MAGI2_CHECK(t >= 1 && h >= 1 && w >= 1, "refiner resample: empty output size ", t, "x", h, "x", w);
  const Tensor x = x_in.to(DType::F32);
  const int64_t c = x.size(1), T = x.size(2), H = x.size(3), W = x.size(4);
  Tensor y = Tensor::zeros({1, c, t, h, w}, DType::F32);
  const float* px = x.data_as<float>();
  float* py = y.data_as<float>();
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t ch = 0; ch < c; ++ch)
    for (int64_t a = 0; a < t; ++a) {
      int64_t t0, t1, h0, h1, w0, w1;
      float ft, fh, fw;
      lerp_at(a, T, t, &t0, &t1, &ft);
      for (int64_t b = 0; b < h; ++b) {
        lerp_at(b, H, h, &h0, &h1, &fh);
        for (int64_t e = 0; e < w; ++e) {
          lerp_at(e, W, w, &w0, &w1, &fw);
          auto at = [&](int64_t tt, int64_t hh, int64_t ww) { return px[((ch * T + tt) * H + hh) * W + ww]; };
          // The weights of the 8 corners, as torch's (1 - f) / f products.
          const float v = (1 - ft) * ((1 - fh) * ((1 - fw) * at(t0, h0, w0) + fw * at(t0, h0, w1)) +
                                      fh * ((1 - fw) * at(t0, h1, w0) + fw * at(t0, h1, w1))) +
                          ft * ((1 - fh) * ((1 - fw) * at(t1, h0, w0) + fw * at(t1, h0, w1)) +
                                fh * ((1 - fw) * at(t1, h1, w0) + fw * at(t1, h1, w1)));
          py[((ch * t + a) * h + b) * w + e] = v;
        }
      }
    }
  return y;
}

std::vector<float> zero_snr_sigmas() {
  const int n = 1000;
  const double s0 = std::sqrt(0.00085), s1 = std::sqrt(0.0120);
  std::vector<double> ac(n);
  double prod = 1.0;
  for (int i = 0; i < n; ++i) {
    const double b = s0 + (s1 - s0) * i / (n - 1);
    prod *= 1.0 - b * b;
    ac[i] = prod;
  }
  // The official code rescales in fp32 after the fp64 cumulative product.
  std::vector<float> a(n);
  for (int i = 0; i < n; ++i) a[i] = std::sqrt(static_cast<float>(ac[i]));
  const float a0 = a[0], aT = a[n - 1];
  for (int i = 0; i < n; ++i) {
    a[i] -= aT;
    a[i] *= a0 / (a0 - aT);
  }
  // get_sigmas flips once (index 0 = clean), the caller's flip=True flips back.
  return a;
}

RefinedLatentSize refined_latent_size(const RefinerEval& eval, int64_t preview_frames, int64_t width_px,
                                      int64_t height_px) {
  MAGI2_CHECK(preview_frames >= 1, "refiner: the preview latent has no frame (", preview_frames, ")");
  MAGI2_CHECK(eval.vae_stride.size() == 3 && eval.vae_stride[1] > 0 && eval.vae_stride[2] > 0,
              "refiner config: magi2_refiner_vae_stride must be 3 positive numbers");
  const RefinedLatentSize r{.frames = 2 * preview_frames - 1,
                            .height = height_px / eval.vae_stride[1],
                            .width = width_px / eval.vae_stride[2]};
  MAGI2_CHECK(r.height >= 1 && r.width >= 1, "refiner size ", width_px, "x", height_px, " is below one latent cell");
  return r;
}

Tensor refiner_branch_forward(Refiner& model, const RefinerPlan& plan, const Tensor& latent, const Tensor& text) {
  // The inputs go up split by modality: the packed [N, c_pad] f32 input of
  // Refiner::forward is 10.5 GB at 1080p (c_pad = the 5120 text channels, the
  // 514k video rows use 48), and packing, permuting and uploading it cost
  // ~25 s of host time per step against ~9 s of GPU work (4 layers, H200).
  const RefinerArch& a = model.arch();
  model.load(plan, split_refiner_inputs(plan, latent, Tensor(), text, a.video_in_channels, a.audio_in_channels,
                                        a.text_in_channels));
  model.run();
  return unpack_refiner_video(plan, model.output(), a.video_in_channels);
}

RefineResult refine_latents(Refiner& model, const RefinerConfig& cfg, const RefineRequest& req) {
  const RefinerArch& arch = model.arch();
  const Tensor& pl = req.preview_latent;
  MAGI2_CHECK(pl.defined() && pl.dim() == 5 && pl.size(0) == 1 && pl.size(1) == arch.video_in_channels,
              "refiner input latent: expected [1, ", arch.video_in_channels, ", T, h, w], got ",
              pl.defined() ? shape_str(pl.shape()) : std::string("nothing"));
  const int steps = req.num_steps < 0 ? cfg.eval.num_inference_steps : req.num_steps;
  MAGI2_CHECK(steps >= 1 && steps <= 1000, "--refiner-num-inference-steps must be in 1..1000, got ", steps);
  const RefinedLatentSize rs = refined_latent_size(cfg.eval, pl.size(2), req.width_px, req.height_px);
  const int64_t T = rs.frames, H = rs.height, W = rs.width;
  MAGI2_CHECK(req.text_cond.defined() && req.text_uncond.defined(),
              "refiner text features: both the prompt and the negative-prompt features are required");
  const Tensor tc = drop_batch(req.text_cond), tu = drop_batch(req.text_uncond);

  Tensor latent = resample_trilinear_align_corners(pl, T, H, W);
  const Shape vshape = latent.shape();
  const Tensor noise =
      req.renoise.defined() ? req.renoise.to(DType::F32) : randn_philox(vshape, req.seed, kNoiseStreamRefiner);
  check_tensor(noise, vshape, DType::F32, "refiner re-noise");
  if (cfg.eval.noise_value != 0) {
    const float sigma = zero_snr_sigmas()[cfg.eval.noise_value];
    const float keep = std::sqrt(1.0f - sigma * sigma);
    float* x = latent.data_as<float>();
    const float* e = noise.data_as<float>();
    for (int64_t i = 0; i < latent.numel(); ++i) x[i] = x[i] * sigma + e[i] * keep;
  }

  RefinerLayout lc{.frames = T, .height = H, .width = W, .audio_len = 0, .text_len = tc.size(0)};
  RefinerLayout lu = lc;
  lu.text_len = tu.size(0);
  const RefinerPlan pc = make_refiner_plan(lc, arch, cfg.eval.window);
  const RefinerPlan pu = make_refiner_plan(lu, arch, cfg.eval.window);
  FlowUniPC sched;
  sched.set_timesteps(steps, cfg.eval.shift);
  const float scale = static_cast<float>(cfg.eval.video_guidance_scale);

  RefineResult res;
  res.tokens = lc.tokens();
  for (int s = 0; s < steps; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    const Tensor cond = refiner_branch_forward(model, pc, latent, tc);
    const Tensor uncond = refiner_branch_forward(model, pu, latent, tu);
    Tensor v = Tensor::empty(vshape, DType::F32);  // every element written below
    const float* pcnd = cond.data_as<float>();
    const float* punc = uncond.data_as<float>();
    float* pv = v.data_as<float>();
    const int64_t nel = v.numel();
#pragma omp parallel for schedule(static)  // element-wise: 25M values at 1080p, ~0.2 s on one core
    for (int64_t i = 0; i < nel; ++i) pv[i] = cfg_combine_f32(pcnd[i], punc[i], scale);
    latent = sched.step(v, latent);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    res.step_ms.push_back(ms);
    if (req.on_step) req.on_step(s, latent);
    if (req.on_progress && !req.on_progress(s, steps, ms)) {
      res.cancelled = true;
      break;
    }
  }
  for (int64_t i = 0; i < latent.numel(); ++i)
    MAGI2_CHECK(std::isfinite(latent.data_as<float>()[i]), "refiner produced non-finite values; nothing was written");
  res.latent = latent;
  return res;
}

}  // namespace magi2
