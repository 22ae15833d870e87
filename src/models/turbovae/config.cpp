// TurboVAE config JSON (see config.h).
#include "models/turbovae/config.h"

#include <nlohmann/json.hpp>

#include <algorithm>

#include "core/error.h"
#include "io/json_depth.h"
#include "io/mmap_file.h"

namespace magi2 {
namespace {

using json = nlohmann::json;

bool has_kind(const json& v, const int*) { return v.is_number_integer(); }
bool has_kind(const json& v, const double*) { return v.is_number(); }
bool has_kind(const json& v, const bool*) { return v.is_boolean(); }
bool has_kind(const json& v, const std::vector<int>*) {
  return v.is_array() && std::all_of(v.begin(), v.end(), [](const json& x) { return x.is_number_integer(); });
}
bool has_kind(const json& v, const std::vector<bool>*) {
  return v.is_array() && std::all_of(v.begin(), v.end(), [](const json& x) { return x.is_boolean(); });
}

template <typename T>
void get(const json& j, const char* key, T* out, const std::string& src) {
  if (!j.contains(key)) return;
  const json& v = j.at(key);
  MAGI2_CHECK(has_kind(v, out), "TurboVAE config '", src, "': ", key, " has the wrong type (", v.dump(), ")");
  *out = v.get<T>();
}

}  // namespace

TurboVaeConfig TurboVaeConfig::from_json_text(const std::string& text, const std::string& src) {
  // Any JSON type mismatch below (a number where a string is due, ...)
  // becomes one Error naming the source, like every other bad value.
  try {
    const json j = parse_json_text(text, str_cat("TurboVAE config '", src, "'"));
    MAGI2_CHECK(j.is_object(), "TurboVAE config '", src, "' is not a JSON object");
    TurboVaeConfig c;
    get(j, "latent_channels", &c.latent_channels, src);
    get(j, "out_channels", &c.out_channels, src);
    get(j, "decoder_block_out_channels", &c.decoder_block_out_channels, src);
    get(j, "decoder_layers_per_block", &c.decoder_layers_per_block, src);
    get(j, "decoder_spatio_temporal_scaling", &c.decoder_spatio_temporal_scaling, src);
    get(j, "decoder_spatio_only", &c.decoder_spatio_only, src);
    get(j, "decoder_is_dw_conv", &c.decoder_is_dw_conv, src);
    get(j, "decoder_dw_kernel_size", &c.decoder_dw_kernel_size, src);
    get(j, "decoder_causal", &c.decoder_causal, src);
    get(j, "patch_size", &c.patch_size, src);
    get(j, "patch_size_t", &c.patch_size_t, src);
    get(j, "resnet_norm_eps", &c.resnet_norm_eps, src);
    get(j, "first_chunk_size", &c.first_chunk_size, src);
    get(j, "step_size", &c.step_size, src);
    get(j, "spatial_compression_ratio", &c.spatial_compression_ratio, src);
    get(j, "temporal_compression_ratio", &c.temporal_compression_ratio, src);
    get(j, "use_unpatchify", &c.use_unpatchify, src);
    c.validate(src);
    return c;
  } catch (const nlohmann::json::exception& e) {
    throw Error(str_cat("TurboVAE config '", src, "': ", e.what()));
  }
}

TurboVaeConfig TurboVaeConfig::from_json_file(const std::string& path) {
  return from_json_text(read_text_file(path), path);
}

std::string TurboVaeConfig::to_json() const {
  nlohmann::ordered_json j;
  j["_class_name"] = "TurboVAED";
  j["in_channels"] = 3;
  j["out_channels"] = out_channels;
  j["latent_channels"] = latent_channels;
  j["decoder_block_out_channels"] = decoder_block_out_channels;
  j["decoder_layers_per_block"] = decoder_layers_per_block;
  j["decoder_spatio_temporal_scaling"] = decoder_spatio_temporal_scaling;
  j["decoder_spatio_only"] = decoder_spatio_only;
  j["decoder_is_dw_conv"] = decoder_is_dw_conv;
  j["decoder_dw_kernel_size"] = decoder_dw_kernel_size;
  j["decoder_causal"] = decoder_causal;
  j["patch_size"] = patch_size;
  j["patch_size_t"] = patch_size_t;
  j["resnet_norm_eps"] = resnet_norm_eps;
  j["scaling_factor"] = 1.0;
  j["first_chunk_size"] = first_chunk_size;
  j["step_size"] = step_size;
  j["spatial_compression_ratio"] = spatial_compression_ratio;
  j["temporal_compression_ratio"] = temporal_compression_ratio;
  j["use_unpatchify"] = use_unpatchify;
  return j.dump(2) + "\n";
}

void TurboVaeConfig::validate(const std::string& src) const {
  auto fail = [&](const char* key, const std::string& why) {
    return Error(str_cat("TurboVAE config '", src, "': ", key, ": ", why));
  };
  const size_t nb = decoder_block_out_channels.size();
  if (nb != 4) throw fail("decoder_block_out_channels", "expected 4 up blocks");
  for (int c : decoder_block_out_channels)
    if (c <= 0) throw fail("decoder_block_out_channels", "widths must be positive");
  if (decoder_layers_per_block.size() != nb + 1) throw fail("decoder_layers_per_block", "expected 5 entries");
  for (int n : decoder_layers_per_block)
    if (n < 0) throw fail("decoder_layers_per_block", "counts must be >= 0");
  if (decoder_spatio_temporal_scaling.size() != nb) throw fail("decoder_spatio_temporal_scaling", "expected 4 entries");
  if (decoder_spatio_only.size() != nb) throw fail("decoder_spatio_only", "expected 4 entries");
  if (decoder_is_dw_conv.size() != nb + 1) throw fail("decoder_is_dw_conv", "expected 5 entries");
  for (bool dw : decoder_is_dw_conv)
    if (dw) throw fail("decoder_is_dw_conv", "depth-wise separable convs are not implemented (the release has none)");
  if (decoder_causal) throw fail("decoder_causal", "the official decoder only supports false");
  if (patch_size != 2) throw fail("patch_size", "the official decoder requires 2");
  if (patch_size_t != 1) throw fail("patch_size_t", "only 1 is supported");
  if (!use_unpatchify) throw fail("use_unpatchify", "only the unpatchify head (true, the release) is implemented");
  if (latent_channels <= 0 || out_channels <= 0) throw fail("latent_channels", "must be positive");
  if (first_chunk_size < 1 || step_size < 1) throw fail("first_chunk_size", "chunk sizes must be >= 1");
  if (temporal_compression_ratio < 1) throw fail("temporal_compression_ratio", "must be >= 1");
  if (!(resnet_norm_eps > 0)) throw fail("resnet_norm_eps", "must be positive");
  // The frame/pixel counts of the sliding window assume the ratios the blocks produce.
  if (temporal_compression_ratio != 1 << temporal_upsamplers())
    throw fail("temporal_compression_ratio", str_cat("must be ", 1 << temporal_upsamplers(), " for these up blocks"));
  if (spatial_compression_ratio != spatial_upscale())
    throw fail("spatial_compression_ratio", str_cat("must be ", spatial_upscale(), " for these up blocks"));
}

int TurboVaeConfig::spatial_upscale() const {
  int s = patch_size;
  for (bool b : decoder_spatio_temporal_scaling) s *= b ? 2 : 1;
  return s;
}

int TurboVaeConfig::temporal_upsamplers() const {
  int n = 0;
  for (size_t i = 0; i < decoder_spatio_temporal_scaling.size(); ++i)
    n += decoder_spatio_temporal_scaling[i] && !decoder_spatio_only[i];
  return n;
}

}  // namespace magi2
