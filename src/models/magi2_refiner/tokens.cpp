#include "models/magi2_refiner/tokens.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace magi2 {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }


void coord_row(float* r, double t, double h, double w, double st, double sh, double sw, double rt, double rh,
               double rw) {
  const double v[9] = {t, h, w, st, sh, sw, rt, rh, rw};
  for (int i = 0; i < 9; ++i) r[i] = static_cast<float>(v[i]);
}

Tensor drop_batch(const Tensor& t, int64_t rank) {
  if (t.dim() == rank + 1 && t.size(0) == 1) return t.reshape(Shape(t.shape().begin() + 1, t.shape().end()));
  return t;
}

}  // namespace

RefinerPlan make_refiner_plan(const RefinerLayout& L, const RefinerArch& arch, const RefinerWindow& win) {
  MAGI2_CHECK(L.frames >= 1 && L.height >= 1 && L.width >= 1, "refiner layout: empty latent grid ", L.frames, "x",
              L.height, "x", L.width);
  MAGI2_CHECK(L.text_len >= 0 && L.audio_len >= 0, "refiner layout: negative token counts");
  RefinerPlan p;
  p.layout = L;
  p.c_pad = std::max({arch.video_in_channels, arch.audio_in_channels, arch.text_in_channels});
  const int64_t T = L.frames, H = L.height, W = L.width, nv = L.video_tokens(), n = L.tokens();
  const int64_t bt = win.block_t, bs = win.block_hw;
  const int64_t gt = ceil_div(T, bt), gh = ceil_div(H, bs), gw = ceil_div(W, bs);

  // Video tokens block by block (blocks t-major, then h, then w; inside a
  // block t, h, w order), then the other tokens in their original order.
  std::vector<int32_t> block_begin;  // packed start of each block, plus the end
  p.token_order.reserve(n);
  for (int64_t a = 0; a < gt; ++a)
    for (int64_t b = 0; b < gh; ++b)
      for (int64_t c = 0; c < gw; ++c) {
        block_begin.push_back(static_cast<int32_t>(p.token_order.size()));
        for (int64_t t = a * bt; t < std::min(T, (a + 1) * bt); ++t)
          for (int64_t h = b * bs; h < std::min(H, (b + 1) * bs); ++h)
            for (int64_t w = c * bs; w < std::min(W, (c + 1) * bs); ++w)
              p.token_order.push_back(static_cast<int32_t>((t * H + h) * W + w));
      }
  block_begin.push_back(static_cast<int32_t>(nv));
  for (int64_t i = nv; i < n; ++i) p.token_order.push_back(static_cast<int32_t>(i));

  // Modality and coordinates in original order, then permuted.
  std::vector<float> co(static_cast<size_t>(n) * 9);
  std::vector<int32_t> mo(static_cast<size_t>(n));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t w = 0; w < W; ++w) {
        const int64_t i = (t * H + h) * W + w;
        coord_row(&co[i * 9], t, h, w, T, H, W, T, H, W);  // "extra": the reference grid is the grid itself
        mo[i] = 0;
      }
  const int64_t la = L.audio_len, lt = L.text_len;
  // Python floor division: (la - 1) // 8 + 1 is 0 for la = 0 (no rows then).
  const int64_t audio_ref = la > 0 ? (la - 1) / 8 + 1 : 0;
  for (int64_t i = 0; i < la; ++i) {
    coord_row(&co[(nv + i) * 9], i, 0, 0, la, 1, 1, audio_ref, 1, 1);
    mo[nv + i] = 1;
  }
  for (int64_t i = 0; i < lt; ++i) {
    coord_row(&co[(nv + la + i) * 9], i - lt, 0, 0, lt, 1, 1, 1, 1, 1);
    mo[nv + la + i] = 2;
  }
  p.coords = Tensor::zeros({n, 9}, DType::F32);
  p.modality = Tensor::zeros({n}, DType::I32);
  float* pc = p.coords.data_as<float>();
  int32_t* pm = p.modality.data_as<int32_t>();
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(pc + i * 9, &co[static_cast<size_t>(p.token_order[i]) * 9], 9 * sizeof(float));
    pm[i] = mo[p.token_order[i]];
  }

  // Attention pairs in the official order: dense pairs first (each video
  // block -> all non-video tokens; non-video chunks of one block volume -> all
  // video tokens, then -> all non-video tokens), then the grid window (for
  // each neighbour offset dt, dh, dw: every query block that has it).
  std::vector<int32_t> qr, kr;
  auto pair = [&](int64_t q0, int64_t q1, int64_t k0, int64_t k1) {
    qr.insert(qr.end(), {static_cast<int32_t>(q0), static_cast<int32_t>(q1)});
    kr.insert(kr.end(), {static_cast<int32_t>(k0), static_cast<int32_t>(k1)});
  };
  const int64_t nblocks = gt * gh * gw;
  if (n > nv) {
    for (int64_t b = 0; b < nblocks; ++b) pair(block_begin[b], block_begin[b + 1], nv, n);
    const int64_t chunk = bt * bs * bs;
    for (int pass = 0; pass < 2; ++pass)
      for (int64_t s = nv; s < n; s += chunk) pair(s, std::min(n, s + chunk), pass == 0 ? 0 : nv, pass == 0 ? nv : n);
  }
  for (int64_t dt = -win.radius_t; dt <= win.radius_t; ++dt)
    for (int64_t dh = -win.radius_h; dh <= win.radius_h; ++dh)
      for (int64_t dw = -win.radius_w; dw <= win.radius_w; ++dw)
        for (int64_t b = 0; b < nblocks; ++b) {
          const int64_t a = b / (gh * gw), c = (b / gw) % gh, e = b % gw;
          const int64_t ka = a + dt, kc = c + dh, ke = e + dw;
          if (ka < 0 || ka >= gt || kc < 0 || kc >= gh || ke < 0 || ke >= gw) continue;
          const int64_t kb = (ka * gh + kc) * gw + ke;
          pair(block_begin[b], block_begin[b + 1], block_begin[kb], block_begin[kb + 1]);
        }
  const int64_t np = static_cast<int64_t>(qr.size() / 2);
  p.q_ranges = Tensor::from_i32({np, 2}, qr);
  p.k_ranges = Tensor::from_i32({np, 2}, kr);
  return p;
}

namespace {

// The inputs of one forward as f32 without the batch dimension, checked
// against the plan (the errors of pack_refiner_tokens).
struct CheckedInputs {
  Tensor latent, audio, text;
};

CheckedInputs check_inputs(const RefinerPlan& plan, const Tensor& latent_in, const Tensor& audio_in,
                           const Tensor& text_in, int64_t cv, int64_t ca) {
  const RefinerLayout& L = plan.layout;
  CheckedInputs in;
  in.latent = drop_batch(latent_in, 4).to(DType::F32);
  check_tensor(in.latent, {cv, L.frames, L.height, L.width}, DType::F32, "refiner input latent");
  in.text = drop_batch(text_in, 2).to(DType::F32);
  MAGI2_CHECK(in.text.dim() == 2 && in.text.size(0) == L.text_len && in.text.size(1) <= plan.c_pad,
              "refiner text features: expected [", L.text_len, ", <= ", plan.c_pad, "], got ",
              shape_str(text_in.shape()));
  if (L.audio_len > 0) {
    in.audio = drop_batch(audio_in, 2).to(DType::F32);
    check_tensor(in.audio, {L.audio_len, ca}, DType::F32, "refiner audio latent");
  }
  MAGI2_CHECK(static_cast<int64_t>(plan.token_order.size()) == L.tokens(), "refiner plan: ",
              plan.token_order.size(), " packed rows for ", L.tokens(), " tokens");
  return in;
}

}  // namespace

Tensor pack_refiner_tokens(const RefinerPlan& plan, const Tensor& latent_in, const Tensor& audio_in,
                           const Tensor& text_in, int64_t cv, int64_t ca) {
  const RefinerLayout& L = plan.layout;
  const CheckedInputs in = check_inputs(plan, latent_in, audio_in, text_in, cv, ca);
  const int64_t n = L.tokens(), nv = L.video_tokens(), c = plan.c_pad;
  Tensor x = Tensor::zeros({n, c}, DType::F32);
  float* px = x.data_as<float>();
  const float* lv = in.latent.data_as<float>();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t src = plan.token_order[i];
    float* row = px + i * c;
    if (src < nv) {
      for (int64_t ch = 0; ch < cv; ++ch) row[ch] = lv[ch * nv + src];
    } else if (src < nv + L.audio_len) {
      std::memcpy(row, in.audio.data_as<float>() + (src - nv) * ca, ca * sizeof(float));
    } else {
      const int64_t tc = in.text.size(1);
      std::memcpy(row, in.text.data_as<float>() + (src - nv - L.audio_len) * tc, tc * sizeof(float));
    }
  }
  return x;
}

RefinerInputs split_refiner_inputs(const RefinerPlan& plan, const Tensor& latent_in, const Tensor& audio_in,
                                   const Tensor& text_in, int64_t cv, int64_t ca, int64_t ct) {
  const RefinerLayout& L = plan.layout;
  const CheckedInputs in = check_inputs(plan, latent_in, audio_in, text_in, cv, ca);
  const int64_t n = L.tokens(), nv = L.video_tokens(), na = L.audio_len;
  MAGI2_CHECK(ct >= 1 && ct <= plan.c_pad, "refiner text in-channels ", ct, " must be in [1, ", plan.c_pad, "]");
  check_tensor(plan.modality, {n}, DType::I32, "refiner plan modality");
  // Each packed row's row inside its modality (a serial pass: the checks throw).
  const int32_t* mod = plan.modality.data_as<int32_t>();
  std::vector<int64_t> row(static_cast<size_t>(n));
  int64_t next[3] = {0, 0, 0};
  for (int64_t i = 0; i < n; ++i) {
    const int64_t src = plan.token_order[i];
    MAGI2_CHECK(src >= 0 && src < n, "refiner plan: packed row ", i, " holds token ", src, " of ", n);
    const int m = src < nv ? 0 : src < nv + na ? 1 : 2;
    MAGI2_CHECK(mod[i] == m, "refiner plan: packed row ", i, " has modality ", mod[i], " but holds token ", src);
    row[i] = next[m]++;
  }
  RefinerInputs r{.video = Tensor::empty({nv, cv}, DType::F32),
                  .audio = Tensor::empty({na, ca}, DType::F32),
                  .text = Tensor::zeros({L.text_len, ct}, DType::F32)};  // zeros: the columns past the features
  float* pv = r.video.data_as<float>();
  float* pa = r.audio.data_as<float>();
  float* pt = r.text.data_as<float>();
  const float* lv = in.latent.data_as<float>();
  const int64_t tc = in.text.size(1), tw = std::min(tc, ct);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const int64_t src = plan.token_order[i];
    if (src < nv) {
      float* dst = pv + row[i] * cv;
      for (int64_t ch = 0; ch < cv; ++ch) dst[ch] = lv[ch * nv + src];
    } else if (src < nv + na) {
      std::memcpy(pa + row[i] * ca, in.audio.data_as<float>() + (src - nv) * ca, ca * sizeof(float));
    } else {
      std::memcpy(pt + row[i] * ct, in.text.data_as<float>() + (src - nv - na) * tc, tw * sizeof(float));
    }
  }
  return r;
}

Tensor unpack_refiner_video(const RefinerPlan& plan, const Tensor& out_in, int64_t cv) {
  const RefinerLayout& L = plan.layout;
  // No copy of an f32 output (131 MB at 1080p, once per forward).
  const Tensor out = out_in.dtype() == DType::F32 && out_in.is_contiguous() ? out_in : out_in.to(DType::F32);
  MAGI2_CHECK(out.dim() == 2 && out.size(0) == L.tokens() && out.size(1) >= cv, "refiner output: expected [",
              L.tokens(), ", >= ", cv, "], got ", shape_str(out_in.shape()));
  const int64_t nv = L.video_tokens(), c = out.size(1);
  Tensor v = Tensor::zeros({1, cv, L.frames, L.height, L.width}, DType::F32);
  float* pv = v.data_as<float>();
  const float* po = out.data_as<float>();
  MAGI2_CHECK(static_cast<int64_t>(plan.token_order.size()) == L.tokens(), "refiner plan: ",
              plan.token_order.size(), " packed rows for ", L.tokens(), " tokens");
#pragma omp parallel for schedule(static)  // distinct rows write distinct cells
  for (int64_t i = 0; i < L.tokens(); ++i) {
    const int64_t src = plan.token_order[i];
    if (src >= nv) continue;
    for (int64_t ch = 0; ch < cv; ++ch) pv[ch * nv + src] = po[i * c + ch];
  }
  return v;
}

}  // namespace magi2
