#include "models/qwen35/text_config.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/json_depth.h"
#include "io/mmap_file.h"

namespace magi2::qwen35 {

using json = nlohmann::json;

namespace {

struct Reader {
  const json& j;
  const std::string& src;
  Error bad(const std::string& key, const std::string& why) const {
    return Error(str_cat("text encoder config '", src, "': ", key, ": ", why));
  }
  int integer(const char* key, bool required = true, int def = 0) const {
    if (!j.contains(key) || j[key].is_null()) {
      if (required) throw bad(key, "is missing");
      return def;
    }
    if (!j[key].is_number_integer()) throw bad(key, "must be an integer");
    const auto v = j[key].get<int64_t>();
    if (v < 1 || v > (int64_t{1} << 30)) throw bad(key, str_cat("must be positive, got ", v));
    return static_cast<int>(v);
  }
  double number(const json& o, const char* key, double def) const {
    if (!o.contains(key) || o[key].is_null()) return def;
    if (!o[key].is_number()) throw bad(key, "must be a number");
    return o[key].get<double>();
  }
};

}  // namespace

TextConfig TextConfig::from_json_text(std::string_view text, const std::string& source) {
  // Any JSON type mismatch below (a number where a string is due, ...)
  // becomes one Error naming the source, like every other bad value.
  try {
    check_json_depth(text, str_cat("text encoder config '", source, "'"));
    json root;
    try {
      root = json::parse(text);
    } catch (const json::parse_error& e) {
      throw Error(str_cat("text encoder config '", source, "' is not valid JSON: ", e.what()));
    }
    if (!root.is_object()) throw Error(str_cat("text encoder config '", source, "' is not a JSON object"));
    const json* jp = &root;
    const std::string model_type = root.value("model_type", std::string());
    if (root.contains("text_config")) {
      if (!root["text_config"].is_object())
        throw Error(str_cat("text encoder config '", source, "': text_config must be an object"));
      jp = &root["text_config"];
    } else if (model_type == "qwen3_5") {
      throw Error(str_cat("text encoder config '", source, "': composite qwen3_5 config without text_config"));
    }
    const json& j = *jp;
    Reader r{j, source};
    const std::string tm = j.value("model_type", model_type);
    if (!tm.empty() && tm != "qwen3_5_text" && tm != "qwen3_5")
      throw r.bad("model_type", str_cat("expected qwen3_5_text, got '", tm, "'"));
    TextConfig c;
    c.source = source;
    c.hidden_size = r.integer("hidden_size");
    c.num_hidden_layers = r.integer("num_hidden_layers");
    c.intermediate_size = r.integer("intermediate_size");
    c.vocab_size = r.integer("vocab_size");
    c.num_attention_heads = r.integer("num_attention_heads");
    c.num_key_value_heads = r.integer("num_key_value_heads");
    c.head_dim = r.integer("head_dim", false, c.hidden_size / c.num_attention_heads);
    c.linear_num_key_heads = r.integer("linear_num_key_heads");
    c.linear_num_value_heads = r.integer("linear_num_value_heads");
    c.linear_key_head_dim = r.integer("linear_key_head_dim");
    c.linear_value_head_dim = r.integer("linear_value_head_dim");
    c.linear_conv_kernel_dim = r.integer("linear_conv_kernel_dim", false, 4);
    c.rms_norm_eps = r.number(j, "rms_norm_eps", 1e-6);
    if (const std::string act = j.value("hidden_act", std::string("silu")); act != "silu")
      throw r.bad("hidden_act", str_cat("only silu is supported, got '", act, "'"));
    if (j.value("attention_bias", false)) throw r.bad("attention_bias", "attention biases are not supported");
    // Rope: transformers 5 keeps it in rope_parameters, older files at the top level.
    const json& rp = j.contains("rope_parameters") && j["rope_parameters"].is_object() ? j["rope_parameters"] : j;
    c.rope_theta = r.number(rp, "rope_theta", r.number(j, "rope_theta", 1e7));
    c.partial_rotary_factor = r.number(rp, "partial_rotary_factor", r.number(j, "partial_rotary_factor", 0.25));
    if (rp.contains("rope_type") && rp["rope_type"] != "default")
      throw r.bad("rope_parameters.rope_type", "only the default rope is supported");
    if (rp.contains("mrope_section") && rp["mrope_section"].is_array())
      for (const auto& v : rp["mrope_section"]) c.mrope_section.push_back(v.get<int>());
    if (j.contains("layer_types")) {
      if (!j["layer_types"].is_array() || static_cast<int>(j["layer_types"].size()) != c.num_hidden_layers)
        throw r.bad("layer_types", str_cat("must list ", c.num_hidden_layers, " layer kinds"));
      for (const auto& v : j["layer_types"]) {
        const std::string k = v.is_string() ? v.get<std::string>() : "";
        if (k != "full_attention" && k != "linear_attention")
          throw r.bad("layer_types", str_cat("unknown layer kind ", v.dump()));
        c.full_attention.push_back(k == "full_attention");
      }
    } else {
      const int every = r.integer("full_attention_interval", false, 4);
      for (int i = 0; i < c.num_hidden_layers; ++i) c.full_attention.push_back((i + 1) % every == 0);
    }
    if (c.num_attention_heads % c.num_key_value_heads != 0)
      throw r.bad("num_key_value_heads", "must divide num_attention_heads");
    if (c.linear_num_value_heads % c.linear_num_key_heads != 0)
      throw r.bad("linear_num_value_heads", "must be a multiple of linear_num_key_heads");
    if (c.rotary_dim() < 2 || c.rotary_dim() % 2 != 0 || c.rotary_dim() > c.head_dim)
      throw r.bad("partial_rotary_factor", str_cat("gives ", c.rotary_dim(), " rotary dims of ", c.head_dim));
    if (!(c.rms_norm_eps > 0)) throw r.bad("rms_norm_eps", "must be positive");
    return c;
  } catch (const nlohmann::json::exception& e) {
    throw Error(str_cat("text encoder config '", source, "': ", e.what()));
  }
}

TextConfig TextConfig::from_file(const std::string& path) { return from_json_text(read_text_file(path), path); }

TextConfig TextConfig::qwen35_27b(int layers) {
  TextConfig c;
  c.hidden_size = 5120;
  c.num_hidden_layers = layers;
  c.intermediate_size = 17408;
  c.vocab_size = 248320;
  c.num_attention_heads = 24;
  c.num_key_value_heads = 4;
  c.head_dim = 256;
  c.rope_theta = 1e7;
  c.partial_rotary_factor = 0.25;
  c.mrope_section = {11, 11, 10};
  c.linear_num_key_heads = 16;
  c.linear_num_value_heads = 48;
  c.linear_key_head_dim = 128;
  c.linear_value_head_dim = 128;
  c.linear_conv_kernel_dim = 4;
  for (int l = 0; l < layers; ++l) c.full_attention.push_back(l % 4 == 3);
  c.source = "built-in Qwen3.5-27B text config";
  return c;
}

}  // namespace magi2::qwen35
