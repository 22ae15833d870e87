// Prompt enhancement end to end: a short prompt (and, for I2V, the reference
// image) -> the chat request -> the endpoint's JSON caption -> checked ->
// rendered to the Markdown the text encoder receives as plain text.
// Source: official inference/prompt_enhancement/enhancer.py
// (PromptEnhancer.enhance, to_image_url), SandAI-org/MAGI-2-preview f68a0f9.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "prompt_enhance/chat_client.h"
#include "prompt_enhance/task.h"

namespace magi2::pe {

/// What to enhance and how to ask. The task is I2V exactly when `image` is set.
struct EnhanceRequest {
  std::string prompt;         ///< the user's prompt (UTF-8)
  std::string image;          ///< I2V: a local PNG/JPEG/WebP path or an http(s)/data: URL; empty: T2V
  std::string template_text;  ///< request template; empty: builtin_template(task)
  std::string model = "gemini-3.1-pro-preview";  ///< the official enhancer's default model name
  int max_tokens = 16384;     ///< the official MAX_OUTPUT_TOKENS
};

/// The outcome, for the caller's report and metrics.
struct EnhanceResult {
  Task task = Task::kT2V;
  std::string markdown;  ///< the enhanced prompt (ends in "\n", as the official renderer's)
  PyJson caption;        ///< the checked caption JSON
  CallStats call;        ///< attempts, HTTP status, times (no secrets)
  double ms = 0;         ///< whole enhancement, request building and rendering included
};

/// The official to_image_url: http://, https:// and data: URLs pass through;
/// a file becomes "data:MIME;base64,..." with MIME from the extension
/// (.png image/png, .webp image/webp, anything else image/jpeg), the bytes
/// unchanged. Errors naming `flag` and the path: missing/unreadable file,
/// over 20 MiB.
std::string image_url(const std::string& image, std::string_view flag = "--image");

/// The request body (JSON text): model, max_tokens, one user message whose
/// content is [{type: text, text: filled template}] plus, for I2V,
/// {type: image_url, image_url: {url}}, and response_format {type:
/// json_schema, json_schema: {name, schema, strict: true}} with the task's
/// official schema. Errors: prompt or template not valid UTF-8.
std::string chat_request_body(const EnhanceRequest& req, Task task);

/// The caption inside a chat-completions answer: choices[0].message.content
/// parsed as JSON (Python json.loads semantics) and check_caption()ed.
/// Errors name `endpoint` and the cause: the answer not JSON or without
/// content, a refusal, content cut at max_tokens, content not JSON, a missing
/// key or schema violation.
PyJson caption_from_response(std::string_view body, Task task, std::string_view endpoint);

/// Runs the whole enhancement against `ep`. Errors: those above and of
/// post_chat_completion; nothing is written anywhere.
EnhanceResult enhance_prompt(const Endpoint& ep, const EnhanceRequest& req);

/// The one line that says PE ran: "prompt enhancement: t2v via URL (model M):
/// 1 attempt, HTTP 200, 812 ms; prompt 42 -> 3120 chars" (chars are code
/// points, as the official "PE done, prompt chars=" line). No secrets.
std::string report_line(const Endpoint& ep, const EnhanceRequest& req, const EnhanceResult& r);

/// The metrics entry: task, endpoint, model, attempts, http_status, ms,
/// wait_ms, response_bytes, prompt_chars, enhanced_chars. No secrets.
nlohmann::json metrics_json(const Endpoint& ep, const EnhanceRequest& req, const EnhanceResult& r);

}  // namespace magi2::pe
