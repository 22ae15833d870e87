// The two prompt-enhancement tasks (text-to-video, image-to-video): names,
// the official response schemas and required top-level keys, the built-in
// request templates, and the check a returned caption must pass.
// Source: official inference/prompt_enhancement/enhancer.py (T2V_TASK,
// I2V_TASK) and pe_schemas.py (the schemas, embedded here as JSON data from
// src/prompt_enhance/data/response_schemas.json).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "models/qwen35/prompt_pyjson.h"

namespace magi2::pe {

using qwen35::PyJson;

/// Which caption the endpoint is asked for: T2V without a reference image,
/// I2V with one (the official enhancer chooses by the image's presence).
enum class Task { kT2V, kI2V };

/// Per-task constants, as the official TaskSpec.
struct TaskSpec {
  Task task;
  std::string_view name;         ///< "t2v" | "i2v" (the --task values)
  std::string_view schema_name;  ///< response_format.json_schema.name: "T2VEnhanceResult" | "I2VEnhanceResult"
  std::vector<std::string_view> required_keys;  ///< top-level keys a caption must have
};

/// The spec of `task`.
const TaskSpec& task_spec(Task task);

/// "t2v" / "i2v" -> Task. Error naming `flag` and the accepted values otherwise.
Task parse_task(std::string_view name, std::string_view flag);

/// The official response schema of `task` (strict JSON Schema: type,
/// properties, required, additionalProperties, items).
const PyJson& response_schema(Task task);

/// Our built-in request template for `task` (src/prompt_enhance/data/t2v.md,
/// i2v.md, written for this project; the official templates work too through
/// --pe-template). Holds the placeholders {user_input_text} and
/// {variation_seed}.
std::string_view builtin_template(Task task);

/// The official template substitution: every "{user_input_text}" replaced by
/// `prompt`, then every "{variation_seed}" by "" (in that order, as upstream).
std::string fill_template(std::string_view template_text, std::string_view prompt);

/// Checks a caption as the official enhancer does (a JSON object holding the
/// task's required top-level keys), then against the task's response schema.
/// Error: "<what>: <cause>" naming the first missing key or the JSON path of
/// the first schema violation (e.g. "global_layer.objects_static[0].texture:
/// expected string, got number").
void check_caption(const PyJson& caption, Task task, std::string_view what);

/// The first violation of `schema` by `value` as "PATH: cause", or "" if it
/// conforms. Supports the keywords the official schemas use: type (a name or a
/// list), properties, required, additionalProperties (false), items, enum,
/// minItems, maxItems. `path` prefixes the reported location.
std::string schema_violation(const PyJson& value, const PyJson& schema, const std::string& path = "");

}  // namespace magi2::pe
