#include "server/video_request.h"

#include <openssl/evp.h>

#include <charconv>
#include <cmath>
#include <set>

#include "core/error.h"
#include "engine/text_conditioning.h"
#include "io/image.h"
#include "io/json_depth.h"
#include "io/mmap_file.h"
#include "pipeline/reference_image.h"

namespace magi2::server {

namespace {

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw HttpError{400, param, message};
}

// A field as text: a JSON string, or a number written back as text.
std::string text_of(const std::string& name, const Field& f) {
  if (f.is_file) bad(name, str_cat("'", name, "' must be a value, not a file"));
  if (f.value.is_string()) return f.value.get<std::string>();
  if (f.value.is_number()) return f.value.dump();
  bad(name, str_cat("'", name, "' must be a string or a number"));
}

std::string string_field(const std::string& name, const Field& f) {
  if (f.is_file || !f.value.is_string()) bad(name, str_cat("'", name, "' must be a string"));
  return f.value.get<std::string>();
}

double number_field(const std::string& name, const Field& f, double lo, double hi) {
  const std::string t = text_of(name, f);
  double v = 0;
  const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec != std::errc() || end != t.data() + t.size() || !std::isfinite(v))
    bad(name, str_cat("'", name, "' must be a number, got '", t, "'"));
  if (v < lo || v > hi) bad(name, str_cat("'", name, "' must be in [", lo, ", ", hi, "], got ", t));
  return v;
}

uint64_t integer_field(const std::string& name, const Field& f, uint64_t lo, uint64_t hi) {
  const std::string t = text_of(name, f);
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec != std::errc() || end != t.data() + t.size())
    bad(name, str_cat("'", name, "' must be a non-negative integer, got '", t, "'"));
  if (v < lo || v > hi) bad(name, str_cat("'", name, "' must be in [", lo, ", ", hi, "], got ", t));
  return v;
}

// A boolean: JSON true/false, or the text "true"/"false" (multipart parts are text).
bool bool_field(const std::string& name, const Field& f) {
  if (!f.is_file && f.value.is_boolean()) return f.value.get<bool>();
  if (!f.is_file && f.value.is_string() && (f.value == "true" || f.value == "false")) return f.value == "true";
  bad(name, str_cat("'", name, "' must be true or false"));
}

// "WxH" with both sides multiples of 16 (the latent grid) within the limit.
void parse_size(const std::string& t, int64_t max_side, int64_t* w, int64_t* h) {
  const auto x = t.find('x');
  auto num = [&](std::string_view s, int64_t* out) {
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
    return ec == std::errc() && end == s.data() + s.size() && !s.empty();
  };
  if (x == std::string::npos || !num(std::string_view(t).substr(0, x), w) ||
      !num(std::string_view(t).substr(x + 1), h))
    bad("size", str_cat("'size' must be WIDTHxHEIGHT (e.g. 448x256), got '", t, "'"));
  for (int64_t v : {*w, *h})
    if (v < 16 || v > max_side || v % 16 != 0)
      bad("size", str_cat("'size' ", t, ": width and height must be multiples of 16 in [16, ", max_side, "]"));
}

// The image bytes of input_reference: a file part, a data: URL, or {"image_url": data URL}.
std::string reference_bytes(const Field& f) {
  if (f.is_file) return f.bytes;
  std::string url;
  if (f.value.is_string()) url = f.value.get<std::string>();
  else if (f.value.is_object() && f.value.contains("image_url") && f.value["image_url"].is_string())
    url = f.value["image_url"].get<std::string>();
  else
    bad("input_reference", "'input_reference' must be an image file, a data: URL or {\"image_url\": data URL}");
  const auto comma = url.find(',');
  if (url.rfind("data:", 0) != 0 || comma == std::string::npos || url.substr(0, comma).find(";base64") == std::string::npos)
    bad("input_reference", "'input_reference' URL must be a base64 data: URL (remote URLs are not fetched)");
  try {
    return base64_decode(url.substr(comma + 1));
  } catch (const Error&) {
    bad("input_reference", "'input_reference' data: URL is not valid base64");
  }
}

}  // namespace

nlohmann::json error_json(const HttpError& e) {
  return {{"error",
           {{"message", e.message},
            {"type", e.type},
            {"param", e.param.empty() ? nlohmann::json() : nlohmann::json(e.param)},
            {"code", nlohmann::json()}}}};
}

std::map<std::string, Field> fields_from_json(const std::string& body) {
  if (json_nesting_depth(body) > kMaxJsonDepth)
    bad("", str_cat("request body nests JSON deeper than ", kMaxJsonDepth, " levels"));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(body);
  } catch (const nlohmann::json::parse_error& e) {
    bad("", str_cat("request body is not valid JSON (byte ", e.byte, ")"));
  }
  if (!j.is_object()) bad("", "request body must be a JSON object");
  std::map<std::string, Field> out;
  for (auto& [k, v] : j.items()) out[k].value = v;
  return out;
}

JobRequest parse_video_request(const std::map<std::string, Field>& fields, const RequestLimits& limits,
                               const std::string& upload_path) {
  static const std::set<std::string> known = {
      "prompt", "model", "seconds", "size", "resolution", "seed", "negative_prompt", "num_inference_steps",
      "guidance_scale", "video_guidance_scale", "audio_guidance_scale", "preview_every", "input_reference",
      "enhance_prompt"};
  for (const auto& [k, f] : fields)
    if (!known.count(k)) bad(k, str_cat("unknown field '", k, "'"));
  auto get = [&](const char* k) -> const Field* {
    auto it = fields.find(k);
    return it == fields.end() || (!it->second.is_file && it->second.value.is_null()) ? nullptr : &it->second;
  };
  JobRequest r;
  GenerateParams& p = r.params;
  const Field* prompt = get("prompt");
  if (!prompt) bad("prompt", "'prompt' is required");
  r.prompt = p.prompt = string_field("prompt", *prompt);
  // The engine's own test (validate() refuses the same when the job runs), here
  // so the client gets a 400 naming the field instead of a failed job.
  if (const std::string why = prompt_problem(r.prompt); !why.empty()) bad("prompt", str_cat("'prompt' ", why));
  r.model = get("model") ? string_field("model", *get("model")) : "magi2-preview";
  r.seconds = "10";
  if (const Field* f = get("seconds")) {
    p.seconds = number_field("seconds", *f, 0.0, limits.max_seconds);
    if (p.seconds <= 0) bad("seconds", "'seconds' must be > 0");
    r.seconds = text_of("seconds", *f);
  }
  const Field* size = get("size");
  const Field* res = get("resolution");
  if (size && res) bad("size", "give only one of 'size' and 'resolution'");
  if (size) {
    parse_size(string_field("size", *size), limits.max_side, &p.width, &p.height);
  } else if (res) {
    p.resolution = string_field("resolution", *res);
    if (p.resolution == "1080p")  // the refiner stage runs minutes per clip on the CPU: CLI only for now
      bad("resolution", "'resolution' 1080p (the refiner) is not served: use magi2 generate --resolution 1080p");
    if (p.resolution != "272p" && p.resolution != "540p")
      bad("resolution", str_cat("'resolution' must be 272p or 540p, got '", p.resolution, "'"));
    if (p.pixel_width() > limits.max_side || p.pixel_height() > limits.max_side)
      bad("resolution", str_cat("'resolution' ", p.resolution, " exceeds the server's limit of ", limits.max_side,
                                " pixels a side"));
  }
  r.size = str_cat(p.pixel_width(), "x", p.pixel_height());
  if (const Field* f = get("seed")) p.seed = integer_field("seed", *f, 0, UINT64_MAX);
  if (const Field* f = get("negative_prompt")) p.negative_prompt = string_field("negative_prompt", *f);
  if (const Field* f = get("num_inference_steps"))
    p.steps = static_cast<int>(integer_field("num_inference_steps", *f, 1, limits.max_steps));
  if (const Field* f = get("guidance_scale"))
    p.video_guidance_scale = p.audio_guidance_scale = number_field("guidance_scale", *f, 0, 100);
  if (const Field* f = get("video_guidance_scale")) p.video_guidance_scale = number_field("video_guidance_scale", *f, 0, 100);
  if (const Field* f = get("audio_guidance_scale")) p.audio_guidance_scale = number_field("audio_guidance_scale", *f, 0, 100);
  if (const Field* f = get("preview_every"))
    r.preview_every = static_cast<int>(integer_field("preview_every", *f, 0, limits.max_steps));
  if (const Field* f = get("enhance_prompt")) {
    p.enhance_prompt = bool_field("enhance_prompt", *f);
    if (p.enhance_prompt && !limits.prompt_enhancement)
      bad("enhance_prompt", "'enhance_prompt' needs a prompt-enhancement endpoint: start the server with --pe-base-url");
  }
  if (const Field* f = get("input_reference")) {
    const std::string bytes = reference_bytes(*f);
    if (bytes.empty()) bad("input_reference", "'input_reference' is empty");
    Tensor rgb;
    try {
      rgb = decode_image_rgb(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "input_reference");
    } catch (const Error& e) {
      bad("input_reference", str_cat("'input_reference' is not a readable PNG or JPEG image: ", e.what()));
    }
    const std::string why = reference_size_problem(rgb.size(1), rgb.size(0), p.pixel_width(), p.pixel_height());
    if (!why.empty()) bad("input_reference", str_cat("'input_reference': ", why));
    write_file_atomic(upload_path, bytes);
    r.upload = p.image = upload_path;
  }
  return r;
}

std::string base64_encode(const std::string& bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3), '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<int>(bytes.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

std::string base64_decode(const std::string& text) {
  std::string t;
  for (char c : text)
    if (c != '\n' && c != '\r' && c != ' ') t += c;
  MAGI2_CHECK(t.size() % 4 == 0, "base64: length ", t.size(), " is not a multiple of 4");
  std::string out(t.size() / 4 * 3, '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(t.data()), static_cast<int>(t.size()));
  MAGI2_CHECK(n >= 0, "base64: invalid characters");
  size_t pad = 0;
  while (pad < 2 && pad < t.size() && t[t.size() - 1 - pad] == '=') ++pad;
  out.resize(static_cast<size_t>(n) - pad);  // EVP_DecodeBlock counts the padding as zero bytes
  return out;
}

}  // namespace magi2::server
