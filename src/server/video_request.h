// The body of POST /v1/videos (JSON or multipart/form-data, as the OpenAI
// videos API sends it) -> a JobRequest, with every bad field a 4xx naming it.
// Field reference: docs/server.md.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "server/job_queue.h"

namespace magi2::server {

/// A 4xx/5xx answer: HTTP status, the request field at fault ("" when none),
/// a one-line message, and the OpenAI error type.
struct HttpError {
  int status = 400;
  std::string param;
  std::string message;
  std::string type = "invalid_request_error";
};

/// The OpenAI error body {"error": {message, type, param, code}}.
nlohmann::json error_json(const HttpError& e);

/// One request field: a JSON value (multipart text parts are strings), or an
/// uploaded file (multipart part with a filename).
struct Field {
  nlohmann::json value;
  bool is_file = false;
  std::string bytes;  ///< file contents
  std::string filename;
};

/// Server-side limits on a request.
struct RequestLimits {
  double max_seconds = 10.0;   ///< longest clip
  int64_t max_side = 1024;     ///< largest width or height in pixels
  int max_steps = 200;         ///< most denoising steps
  /// Whether `enhance_prompt: true` is accepted: the server was started with a
  /// prompt-enhancement endpoint (EngineOptions::prompt_enhancement).
  bool prompt_enhancement = false;
};

/// Parses the fields of one POST /v1/videos. Known fields: prompt (required,
/// not empty or only whitespace: prompt_problem), model, seconds, size ("WxH") or resolution (272p|540p), seed,
/// negative_prompt, num_inference_steps, guidance_scale,
/// video_guidance_scale, audio_guidance_scale, preview_every, enhance_prompt
/// (boolean; 400 when limits.prompt_enhancement is off), input_reference (an image: file part, or a data: URL string or
/// {"image_url": data URL}). A reference image is decoded to check it and
/// written to `upload_path` (request.upload set). Throws HttpError 400 naming
/// the field for a missing, malformed, out-of-range or unknown field.
JobRequest parse_video_request(const std::map<std::string, Field>& fields, const RequestLimits& limits,
                               const std::string& upload_path);

/// Parses a JSON object body into fields. Throws HttpError 400 on bad JSON or
/// a body that is not an object.
std::map<std::string, Field> fields_from_json(const std::string& body);

/// Standard base64 (RFC 4648 with padding) of `bytes`.
std::string base64_encode(const std::string& bytes);

/// Decodes standard base64; throws Error on bad input.
std::string base64_decode(const std::string& text);

}  // namespace magi2::server
