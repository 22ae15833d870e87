#include "models/oobleck/config.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/json_depth.h"
#include "io/mmap_file.h"

namespace magi2 {

namespace {

using json = nlohmann::json;

// Reads obj[key] when present, checking the JSON kind first (nlohmann converts
// silently between numbers and booleans); `where` is the dotted path for messages.
struct Reader {
  const std::string& src;

  Error bad(const std::string& where, const std::string& why) const {
    return Error(str_cat("config '", src, "': ", where, ": ", why));
  }
  const json& object(const json& obj, const char* key, const std::string& where) const {
    if (!obj.contains(key)) throw bad(where + key, "missing");
    const json& v = obj.at(key);
    if (!v.is_object()) throw bad(where + key, "expected an object");
    return v;
  }
  void integer(const json& obj, const char* key, int64_t* out, const std::string& where, bool required) const {
    if (!obj.contains(key)) {
      if (required) throw bad(where + key, "missing");
      return;
    }
    const json& v = obj.at(key);
    if (!v.is_number_integer() || v.get<int64_t>() < 1) throw bad(where + key, "expected a positive integer");
    *out = v.get<int64_t>();
  }
  void boolean(const json& obj, const char* key, bool* out, const std::string& where) const {
    if (!obj.contains(key)) return;
    if (!obj.at(key).is_boolean()) throw bad(where + key, "expected true or false");
    *out = obj.at(key).get<bool>();
  }
  void list(const json& obj, const char* key, std::vector<int64_t>* out, const std::string& where) const {
    if (!obj.contains(key)) return;
    const json& v = obj.at(key);
    if (!v.is_array() || v.empty()) throw bad(where + key, "expected a non-empty list of positive integers");
    out->clear();
    for (const json& e : v) {
      if (!e.is_number_integer() || e.get<int64_t>() < 1)
        throw bad(where + key, "expected a non-empty list of positive integers");
      out->push_back(e.get<int64_t>());
    }
  }
  void type_is(const json& obj, const char* expected, const std::string& where) const {
    if (!obj.contains("type") || !obj.at("type").is_string() || obj.at("type").get<std::string>() != expected)
      throw bad(where + "type", str_cat("expected \"", expected, "\", got ",
                                        obj.contains("type") ? obj.at("type").dump() : std::string("nothing")));
  }

  OobleckCodecConfig codec(const json& ae, const char* which, const std::string& where) const {
    const std::string w = where + which + ".";
    const json& c = object(ae, which, where);
    type_is(c, "oobleck", w);
    OobleckCodecConfig out;
    const json& cfg = object(c, "config", w);
    const std::string wc = w + "config.";
    integer(cfg, std::string(which) == "encoder" ? "in_channels" : "out_channels", &out.io_channels, wc, false);
    integer(cfg, "channels", &out.channels, wc, false);
    list(cfg, "c_mults", &out.c_mults, wc);
    list(cfg, "strides", &out.strides, wc);
    integer(cfg, "latent_dim", &out.latent_dim, wc, false);
    boolean(cfg, "use_snake", &out.use_snake, wc);
    boolean(cfg, "final_tanh", &out.final_tanh, wc);
    boolean(cfg, "use_nearest_upsample", &out.use_nearest_upsample, wc);
    boolean(c, "soft_clip", &out.soft_clip, w);
    if (out.strides.size() < out.c_mults.size())
      throw bad(wc + "strides", str_cat("needs one stride per c_mults entry (", out.c_mults.size(), ")"));
    return out;
  }
};

}  // namespace

SaoVaeConfig SaoVaeConfig::from_json_text(const std::string& text, const std::string& src) {
  // Any JSON type mismatch below (a number where a string is due, ...)
  // becomes one Error naming the source, like every other bad value.
  try {
    const json j = parse_json_text(text, str_cat("config '", src, "'"));
    const Reader r{src};
    if (!j.is_object()) throw Error(str_cat("config '", src, "' is not a JSON object"));
    SaoVaeConfig c;
    c.source = src;
    r.integer(j, "sample_rate", &c.sample_rate, "", true);
    const json& model = r.object(j, "model", "");
    const json& pre = r.object(model, "pretransform", "model.");
    r.type_is(pre, "autoencoder", "model.pretransform.");
    const json& ae = r.object(pre, "config", "model.pretransform.");
    const std::string w = "model.pretransform.config.";
    r.integer(ae, "latent_dim", &c.latent_dim, w, true);
    r.integer(ae, "downsampling_ratio", &c.downsampling_ratio, w, true);
    r.integer(ae, "io_channels", &c.io_channels, w, true);
    c.encoder = r.codec(ae, "encoder", w);
    c.decoder = r.codec(ae, "decoder", w);
    if (ae.contains("bottleneck") && !ae.at("bottleneck").is_null())
      r.type_is(ae.at("bottleneck"), "vae", w + "bottleneck.");

    const OobleckCodecConfig& d = c.decoder;
    const std::string wd = w + "decoder.config.";
    if (!d.use_snake) throw r.bad(wd + "use_snake", "only SnakeBeta decoders are supported (Stable Audio Open: true)");
    if (d.final_tanh) throw r.bad(wd + "final_tanh", "a final tanh is not supported (Stable Audio Open: false)");
    if (d.use_nearest_upsample)
      throw r.bad(wd + "use_nearest_upsample", "nearest upsampling is not supported (Stable Audio Open: false)");
    if (d.soft_clip) throw r.bad(w + "decoder.soft_clip", "soft clipping is not supported (Stable Audio Open: false)");
    if (d.latent_dim != c.latent_dim)
      throw r.bad(wd + "latent_dim", str_cat(d.latent_dim, " differs from ", w, "latent_dim ", c.latent_dim));
    int64_t ratio = 1;
    for (size_t i = 0; i < d.c_mults.size(); ++i) ratio *= d.strides[i];
    if (ratio != c.downsampling_ratio)
      throw r.bad(wd + "strides", str_cat("their product ", ratio, " differs from downsampling_ratio ",
                                          c.downsampling_ratio));
    return c;
  } catch (const nlohmann::json::exception& e) {
    throw Error(str_cat("config '", src, "': ", e.what()));
  }
}

SaoVaeConfig SaoVaeConfig::load(const std::string& sao_dir) {
  const std::string path = sao_dir + "/model_config.json";
  return from_json_text(read_text_file(path), path);
}

}  // namespace magi2
