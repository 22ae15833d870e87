#include "pipeline/packing.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>

#include "core/dtype.h"
#include "core/error.h"

namespace magi2 {

namespace {

// Release generation constants (spec pipeline §1.2, magi2-dit.md §1.4).
constexpr int64_t kVaeSpatialStride = 16;
constexpr int64_t kVaeTemporalStride = 8;
// The DiT sizes the clip on a 25 fps timeline: 2 * round(10 s * 12.5 fps).
constexpr int64_t kVideoTimelineFrames = 250;
constexpr int64_t kAudioFrames = 250;  // 10 s * 25 audio latent frames/s
constexpr int64_t kVideoChannels = 48;
constexpr int64_t kAudioChannels = 64;

std::string dtype_list(std::initializer_list<DType> dtypes) {
  std::string s;
  for (DType d : dtypes) {
    if (!s.empty()) s += "|";
    s += dtype_name(d);
  }
  return s;
}

// Accepts `core` with or without a leading batch dimension of 1 (the official
// tensors carry batch 1; callers holding one sample may drop it).
void check_input(const Tensor& t, const Shape& core, std::initializer_list<DType> dtypes,
                 const char* what) {
  MAGI2_CHECK(t.defined(), "packing: ", what, " is missing (expected shape ", shape_str(core), ")");
  const Shape& s = t.shape();
  const bool shape_ok =
      s == core || (s.size() == core.size() + 1 && s[0] == 1 &&
                    std::equal(s.begin() + 1, s.end(), core.begin()));
  const bool dtype_ok = std::find(dtypes.begin(), dtypes.end(), t.dtype()) != dtypes.end();
  if (!shape_ok || !dtype_ok) {
    Shape batched = core;
    batched.insert(batched.begin(), 1);
    throw Error(str_cat("packing: ", what, ": expected shape ", shape_str(core), " or ",
                        shape_str(batched), " ", dtype_list(dtypes), ", got ", shape_str(s), " ",
                        dtype_name(t.dtype())));
  }
  MAGI2_CHECK(t.device() == Device::CPU && t.is_contiguous(), "packing: ", what,
              " must be a contiguous CPU tensor");
}

// Writes get_coords(shape, ref, offset) rows (official magi2_preview.get_coords):
// row-major over (t, y, x), keeping only the first `count` rows.
void put_grid(float* coords, int64_t row, const std::array<int64_t, 3>& shape,
              const std::array<int64_t, 3>& ref, const std::array<int64_t, 3>& offset,
              int64_t count) {
  int64_t n = 0;
  for (int64_t i = 0; i < shape[0] && n < count; ++i)
    for (int64_t j = 0; j < shape[1] && n < count; ++j)
      for (int64_t k = 0; k < shape[2] && n < count; ++k, ++n) {
        float* r = coords + (row + n) * 9;
        // The official code adds the offset to an fp32 arange; every value is a
        // small integer, so the fp32 sum is exact either way.
        r[0] = static_cast<float>(i) + static_cast<float>(offset[0]);
        r[1] = static_cast<float>(j) + static_cast<float>(offset[1]);
        r[2] = static_cast<float>(k) + static_cast<float>(offset[2]);
        r[3] = static_cast<float>(shape[0]);
        r[4] = static_cast<float>(shape[1]);
        r[5] = static_cast<float>(shape[2]);
        r[6] = static_cast<float>(ref[0]);
        r[7] = static_cast<float>(ref[1]);
        r[8] = static_cast<float>(ref[2]);
      }
}

void put_modality(int32_t* modality, int64_t begin, int64_t count, TokenModality m) {
  std::fill(modality + begin, modality + begin + count, static_cast<int32_t>(m));
}

// Copies `rows` rows of `cols` values from a contiguous F32/BF16 tensor (starting
// at element `src_offset`) into x rows starting at `dst_row`, optionally rounding
// through bf16 first.
void copy_rows(const Tensor& src, int64_t src_offset, int64_t rows, int64_t cols, Tensor& x,
               int64_t dst_row, bool round_to_bf16) {
  float* dst = x.data_as<float>() + dst_row * x.size(1);
  const int64_t stride = x.size(1);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      float v = src.get_f32(src_offset + r * cols + c);
      dst[r * stride + c] = round_to_bf16 ? round_bf16(v) : v;
    }
}

void check_x(const PackingPlan& plan, const Tensor& x) {
  MAGI2_CHECK(x.defined() && x.dtype() == DType::F32 &&
                  x.shape() == Shape({plan.total_tokens, plan.width}) && x.is_contiguous() &&
                  x.device() == Device::CPU,
              "packing: x: expected a contiguous CPU tensor ",
              shape_str({plan.total_tokens, plan.width}), " F32, got ", shape_str(x.shape()), " ",
              dtype_name(x.dtype()));
}

}  // namespace

LatentShape latent_shape_for_pixels(int64_t width_px, int64_t height_px) {
  MAGI2_CHECK(width_px > 0 && height_px > 0 && width_px % kVaeSpatialStride == 0 &&
                  height_px % kVaeSpatialStride == 0,
              "latent shape: frame size ", width_px, "x", height_px,
              " must be positive multiples of ", kVaeSpatialStride);
  LatentShape s;
  s.channels = kVideoChannels;
  s.frames = (kVideoTimelineFrames - 1) / kVaeTemporalStride + 1;
  s.height = height_px / kVaeSpatialStride;
  s.width = width_px / kVaeSpatialStride;
  s.audio_frames = kAudioFrames;
  s.audio_channels = kAudioChannels;
  return s;
}

LatentShape latent_shape_for_resolution(std::string_view resolution) {
  if (resolution == "272p") return latent_shape_for_pixels(448, 256);
  if (resolution == "540p") return latent_shape_for_pixels(896, 512);
  throw Error(str_cat("latent shape: unknown resolution '", resolution,
                      "' (expected 272p or 540p)"));
}

PackingPlan make_packing_plan(const PackingShapes& shapes) {
  const LatentShape& L = shapes.latent;
  auto positive = [](int64_t v, const char* name) {
    MAGI2_CHECK(v >= 1, "packing plan: ", name, " must be >= 1, got ", v);
  };
  positive(L.channels, "latent.channels");
  positive(L.frames, "latent.frames");
  positive(L.height, "latent.height");
  positive(L.width, "latent.width");
  positive(L.audio_frames, "latent.audio_frames");
  positive(L.audio_channels, "latent.audio_channels");
  positive(shapes.text_channels, "text_channels");
  MAGI2_CHECK(shapes.text_len_cond >= 0, "packing plan: text_len_cond must be >= 0, got ",
              shapes.text_len_cond);
  MAGI2_CHECK(shapes.text_len_uncond >= 0, "packing plan: text_len_uncond must be >= 0, got ",
              shapes.text_len_uncond);
  for (size_t k = 0; k < shapes.ref_images.size(); ++k)
    MAGI2_CHECK(shapes.ref_images[k].h >= 1 && shapes.ref_images[k].w >= 1,
                "packing plan: ref_images[", k, "] latent size ", shapes.ref_images[k].h, "x",
                shapes.ref_images[k].w, " must be >= 1x1");

  PackingPlan plan;
  plan.shapes = shapes;
  // Official _pad_cat pads to the widest piece; the text piece counts even with
  // zero rows (its [0, D] tensor still has D columns).
  plan.width = std::max({L.channels, L.audio_channels, shapes.text_channels});

  const int64_t video_tokens = L.frames * L.height * L.width;
  int64_t row = 0;
  for (int b = 0; b < 2; ++b) {
    BranchLayout& br = plan.branches[b];
    br.begin = row;
    br.video_begin = row;
    row += video_tokens;
    br.audio_begin = row;
    row += L.audio_frames;
    br.text_begin = row;
    br.text_len = b == 0 ? shapes.text_len_cond : shapes.text_len_uncond;
    row += br.text_len;
    for (const RefImageShape& img : shapes.ref_images) {
      br.special_row.push_back(row);
      row += 1;
      br.image_begin.push_back(row);
      row += img.h * img.w;
    }
    br.length = row - br.begin;
  }
  plan.total_tokens = row;
  plan.max_seqlen = std::max(plan.branches[0].length, plan.branches[1].length);
  MAGI2_CHECK(plan.total_tokens <= std::numeric_limits<int32_t>::max(), "packing plan: ",
              plan.total_tokens, " packed tokens do not fit the int32 cu_seqlens");

  const int64_t N = plan.total_tokens;
  plan.coords = Tensor::zeros({N, 9}, DType::F32);
  plan.modality = Tensor::zeros({N}, DType::I32);
  plan.cu_seqlens = Tensor::zeros({3}, DType::I32);
  plan.is_noisy = Tensor::zeros({N}, DType::U8);
  float* coords = plan.coords.data_as<float>();
  int32_t* modality = plan.modality.data_as<int32_t>();
  uint8_t* noisy = plan.is_noisy.data_as<uint8_t>();

  for (const BranchLayout& br : plan.branches) {
    // Video: "extra" spatial RoPE interpolation -> the reference grid is the
    // video's own size.
    put_grid(coords, br.video_begin, {L.frames, L.height, L.width},
             {L.frames, L.height, L.width}, {0, 0, 0}, video_tokens);
    put_modality(modality, br.video_begin, video_tokens, TokenModality::Video);
    std::fill(noisy + br.video_begin, noisy + br.video_begin + video_tokens, 1);

    // Audio: its time axis is referenced to the latent frame count it spans
    // ((La - 1) // 8 + 1 = 32 for 250 frames), putting audio on the video timeline.
    const int64_t audio_ref_t = (L.audio_frames - 1) / kVaeTemporalStride + 1;
    put_grid(coords, br.audio_begin, {L.audio_frames, 1, 1}, {audio_ref_t, 1, 1}, {0, 0, 0},
             L.audio_frames);
    put_modality(modality, br.audio_begin, L.audio_frames, TokenModality::Audio);
    std::fill(noisy + br.audio_begin, noisy + br.audio_begin + L.audio_frames, 1);

    // Text: times -L .. -1, i.e. just before the video.
    put_grid(coords, br.text_begin, {br.text_len, 1, 1}, {1, 1, 1}, {-br.text_len, 0, 0},
             br.text_len);
    put_modality(modality, br.text_begin, br.text_len, TokenModality::Text);

    for (size_t k = 0; k < shapes.ref_images.size(); ++k) {
      const int64_t h = shapes.ref_images[k].h, w = shapes.ref_images[k].w;
      // Reference images sit two latent steps after the last video frame (one
      // step of gap), one step apart from each other.
      const int64_t t_off = L.frames + 2 + static_cast<int64_t>(k);
      float* r = coords + br.special_row[k] * 9;
      const float special[9] = {static_cast<float>(t_off), -1.0f, -1.0f, 1.0f,
                                static_cast<float>(h),     static_cast<float>(w),
                                1.0f,                      static_cast<float>(h),
                                static_cast<float>(w)};
      std::memcpy(r, special, sizeof(special));
      // The special token is a text-encoder embedding, hence TEXT; the image
      // patches are video latents, hence VIDEO.
      modality[br.special_row[k]] = static_cast<int32_t>(TokenModality::Text);
      put_grid(coords, br.image_begin[k], {1, h, w}, {1, h, w}, {t_off, 0, 0}, h * w);
      put_modality(modality, br.image_begin[k], h * w, TokenModality::Video);
    }
  }

  int32_t* cu = plan.cu_seqlens.data_as<int32_t>();
  cu[0] = 0;
  cu[1] = static_cast<int32_t>(plan.branches[0].length);
  cu[2] = static_cast<int32_t>(N);
  return plan;
}

Tensor pack_static_tokens(const PackingPlan& plan, const PackingConditioning& cond) {
  const PackingShapes& S = plan.shapes;
  const int64_t D = S.text_channels;
  check_input(cond.text_cond, {S.text_len_cond, D}, {DType::F32, DType::BF16}, "text_cond");
  check_input(cond.text_uncond, {S.text_len_uncond, D}, {DType::F32, DType::BF16},
              "text_uncond");

  Tensor x = Tensor::zeros({plan.total_tokens, plan.width}, DType::F32);
  copy_rows(cond.text_cond, 0, S.text_len_cond, D, x, plan.branches[0].text_begin, false);
  copy_rows(cond.text_uncond, 0, S.text_len_uncond, D, x, plan.branches[1].text_begin, false);

  const int64_t M = static_cast<int64_t>(S.ref_images.size());
  if (M == 0) {
    MAGI2_CHECK(!cond.ref_image_feat.defined() && !cond.ref_special_tokens.defined(),
                "packing: ref_image_feat/ref_special_tokens given but the plan has no reference "
                "images");
    return x;
  }

  const Tensor& feat = cond.ref_image_feat;
  MAGI2_CHECK(feat.defined(), "packing: ref_image_feat is missing (plan has ", M,
              " reference images)");
  // The padded grid Hp x Wp is taken from the tensor; the true (h, w) per image
  // comes from the plan (official ref_image_feat_len).
  const Shape& fs = feat.shape();
  MAGI2_CHECK(fs.size() == 5 || fs.size() == 6, "packing: ref_image_feat: expected shape [1, ", M,
              ", ", S.latent.channels, ", 1, Hp, Wp], got ", shape_str(fs));
  const int64_t Hp = fs[fs.size() - 2], Wp = fs[fs.size() - 1];
  check_input(feat, {M, S.latent.channels, 1, Hp, Wp}, {DType::F32, DType::BF16},
              "ref_image_feat");
  check_input(cond.ref_special_tokens, {M, D}, {DType::F32, DType::BF16}, "ref_special_tokens");
  // Official: the special token is cast to the text features' dtype before packing.
  const bool round_special =
      cond.text_cond.dtype() == DType::BF16 && cond.ref_special_tokens.dtype() != DType::BF16;

  const int64_t Cv = S.latent.channels;
  const int64_t grid = Hp * Wp;
  for (int64_t k = 0; k < M; ++k) {
    const int64_t tokens = S.ref_images[k].h * S.ref_images[k].w;
    MAGI2_CHECK(tokens <= grid, "packing: ref_image_feat: image ", k, " latent size ",
                S.ref_images[k].h, "x", S.ref_images[k].w, " exceeds the tensor grid ", Hp, "x",
                Wp);
    for (const BranchLayout& br : plan.branches) {
      copy_rows(cond.ref_special_tokens, k * D, 1, D, x, br.special_row[k], round_special);
      float* dst = x.data_as<float>() + br.image_begin[k] * plan.width;
      const int64_t base = k * Cv * grid;
      for (int64_t n = 0; n < tokens; ++n)
        for (int64_t c = 0; c < Cv; ++c) dst[n * plan.width + c] = feat.get_f32(base + c * grid + n);
    }
  }
  return x;
}

void pack_latent_tokens(const PackingPlan& plan, const Tensor& latent, const Tensor& audio_latent,
                        Tensor& x) {
  const LatentShape& L = plan.shapes.latent;
  check_input(latent, {L.channels, L.frames, L.height, L.width}, {DType::F32}, "latent");
  check_input(audio_latent, {L.audio_frames, L.audio_channels}, {DType::F32}, "audio_latent");
  check_x(plan, x);

  const int64_t V = L.frames * L.height * L.width;
  const int64_t Cv = L.channels, Ca = L.audio_channels, W = plan.width;
  const float* lat = latent.data_as<float>();
  const float* aud = audio_latent.data_as<float>();
  float* xd = x.data_as<float>();
  for (const BranchLayout& br : plan.branches) {
    // [C, V] -> [V, C]: read every channel plane in step, write one row at a time.
    float* vrows = xd + br.video_begin * W;
    for (int64_t n = 0; n < V; ++n) {
      float* r = vrows + n * W;
      for (int64_t c = 0; c < Cv; ++c) r[c] = lat[c * V + n];
    }
    float* arows = xd + br.audio_begin * W;
    for (int64_t k = 0; k < L.audio_frames; ++k)
      std::memcpy(arows + k * W, aud + k * Ca, static_cast<size_t>(Ca) * sizeof(float));
  }
}

Tensor pack_tokens(const PackingPlan& plan, const Tensor& latent, const Tensor& audio_latent,
                   const PackingConditioning& cond) {
  Tensor x = pack_static_tokens(plan, cond);
  pack_latent_tokens(plan, latent, audio_latent, x);
  return x;
}

void fill_time_embedding(const PackingPlan& plan, float timestep, Tensor& out) {
  MAGI2_CHECK(out.defined() && out.dtype() == DType::F32 &&
                  out.shape() == Shape({plan.total_tokens, kTimeChannels}) &&
                  out.is_contiguous() && out.device() == Device::CPU,
              "packing: time_emb: expected a contiguous CPU tensor ",
              shape_str({plan.total_tokens, kTimeChannels}), " F32, got ",
              shape_str(out.shape()), " ", dtype_name(out.dtype()));
  // Every noisy token shares one time and every clean token has time 0, so two
  // 64-vectors cover the whole sequence.
  float noisy_emb[kTimeChannels];
  float clean_emb[kTimeChannels];
  sinusoidal_embedding(normalize_timestep(timestep), kTimeChannels, noisy_emb);
  sinusoidal_embedding(0.0f, kTimeChannels, clean_emb);
  const uint8_t* noisy = plan.is_noisy.data_as<uint8_t>();
  float* dst = out.data_as<float>();
  for (int64_t n = 0; n < plan.total_tokens; ++n)
    std::memcpy(dst + n * kTimeChannels, noisy[n] ? noisy_emb : clean_emb, sizeof(noisy_emb));
}

Tensor pack_time_embedding(const PackingPlan& plan, float timestep) {
  Tensor out = Tensor::empty({plan.total_tokens, kTimeChannels}, DType::F32);
  fill_time_embedding(plan, timestep, out);
  return out;
}

PackedDitInputs pack_dit_inputs(const PackingPlan& plan, const Tensor& latent,
                                const Tensor& audio_latent, const PackingConditioning& cond,
                                float timestep) {
  PackedDitInputs in;
  in.x = pack_tokens(plan, latent, audio_latent, cond);
  in.coords = plan.coords;
  in.modality = plan.modality;
  in.cu_seqlens = plan.cu_seqlens;
  in.time_emb = pack_time_embedding(plan, timestep);
  in.max_seqlen = plan.max_seqlen;
  return in;
}

UnpackedPrediction unpack_output(const PackingPlan& plan, const Tensor& out) {
  const LatentShape& L = plan.shapes.latent;
  const int64_t need = std::max(L.channels, L.audio_channels);
  MAGI2_CHECK(out.defined() && out.dtype() == DType::F32 && out.dim() == 2 &&
                  out.size(0) == plan.total_tokens && out.size(1) >= need &&
                  out.strides()[1] == 1 && out.device() == Device::CPU,
              "unpack: DiT output: expected a CPU tensor [", plan.total_tokens, ", >=", need,
              "] F32 with unit column stride, got ", shape_str(out.shape()), " ",
              dtype_name(out.dtype()));
  const int64_t V = L.frames * L.height * L.width;
  const int64_t Cv = L.channels, Ca = L.audio_channels;
  const int64_t rs = out.row_stride();
  const float* src = out.data_as<float>();

  UnpackedPrediction pred;
  pred.video = Tensor::empty({2, Cv, L.frames, L.height, L.width}, DType::F32);
  pred.audio = Tensor::empty({2, L.audio_frames, Ca}, DType::F32);
  for (int b = 0; b < 2; ++b) {
    const BranchLayout& br = plan.branches[b];
    float* vid = pred.video.data_as<float>() + b * Cv * V;
    const float* vrows = src + br.video_begin * rs;
    for (int64_t n = 0; n < V; ++n)
      for (int64_t c = 0; c < Cv; ++c) vid[c * V + n] = vrows[n * rs + c];
    float* aud = pred.audio.data_as<float>() + b * L.audio_frames * Ca;
    const float* arows = src + br.audio_begin * rs;
    for (int64_t k = 0; k < L.audio_frames; ++k)
      std::memcpy(aud + k * Ca, arows + k * rs, static_cast<size_t>(Ca) * sizeof(float));
  }
  return pred;
}

LatentTokenMaps latent_token_maps(const PackingPlan& plan, int64_t out_cols) {
  const LatentShape& L = plan.shapes.latent;
  const int64_t V = L.frames * L.height * L.width;
  const int64_t Cv = L.channels, Ca = L.audio_channels, W = plan.width;
  MAGI2_CHECK(plan.total_tokens * std::max(W, out_cols) < (int64_t{1} << 31),
              "packing: ", plan.total_tokens, " tokens x ", std::max(W, out_cols),
              " columns exceed the int32 index maps of the device loop");
  MAGI2_CHECK(out_cols >= std::max(Cv, Ca), "packing: DiT output has ", out_cols, " columns, needs ",
              std::max(Cv, Ca));
  LatentTokenMaps m;
  auto i32 = [](int64_t v) { return static_cast<int32_t>(v); };
  for (const BranchLayout& br : plan.branches) {
    for (int64_t n = 0; n < V; ++n)
      for (int64_t c = 0; c < Cv; ++c) {
        m.video_src.push_back(i32(c * V + n));
        m.video_dst.push_back(i32((br.video_begin + n) * W + c));
      }
    for (int64_t k = 0; k < L.audio_frames; ++k)
      for (int64_t c = 0; c < Ca; ++c) {
        m.audio_src.push_back(i32(k * Ca + c));
        m.audio_dst.push_back(i32((br.audio_begin + k) * W + c));
      }
  }
  for (const BranchLayout& br : plan.branches) {
    for (int64_t c = 0; c < Cv; ++c)
      for (int64_t n = 0; n < V; ++n) m.out_video.push_back(i32((br.video_begin + n) * out_cols + c));
    for (int64_t k = 0; k < L.audio_frames; ++k)
      for (int64_t c = 0; c < Ca; ++c) m.out_audio.push_back(i32((br.audio_begin + k) * out_cols + c));
  }
  const uint8_t* noisy = plan.is_noisy.data_as<uint8_t>();
  for (int64_t r = 0; r < plan.total_tokens; ++r)
    if (noisy[r]) m.noisy_rows.push_back(i32(r));
  return m;
}

}  // namespace magi2
