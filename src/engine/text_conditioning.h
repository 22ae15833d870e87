// Prompt -> text features for the CLI commands (encode-text, generate): where
// the text encoder lives, prompt files, the negative prompt, and the
// truncation report. Official sources: inference/pipeline/entry.py (prompt
// files are read and stripped), inference_engine.py (get_text_embedding for
// the prompt, get_null_feature = the negative prompt's features when
// use_negative_prompt, else an empty [0, D] feature; NEGATIVE_PROMPT env
// override), spec magi2-pipeline.md §2.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "models/qwen35/text_encoder.h"
#include "ops/ops.h"

namespace magi2 {

/// The text encoder folder: `override_dir` when given, else
/// `model_root`/text_encoder. Error naming the folder when it has no config.json.
std::string find_text_encoder_dir(const std::string& model_root, const std::string& override_dir);

/// Contents of a prompt file (UTF-8) with leading/trailing whitespace removed
/// as the official `open(f).read().strip()` does (Python's str.isspace set,
/// Unicode spaces included). A file of only whitespace comes back unstripped,
/// so that prompt_problem names it ("is only whitespace") as for --prompt.
/// Errors: missing/unreadable file or invalid UTF-8 (names the file).
std::string read_prompt_file(const std::string& path);

/// Why `prompt` cannot be generated from, or "" when it can: "is empty", or
/// "is only whitespace" when every character is whitespace in Python's
/// str.isspace sense (spaces, tabs, newlines, U+3000, ...: what the official
/// strip() of a prompt file removes). Such a prompt gives the text encoder
/// nothing to condition on (an empty one fails inside the Gated DeltaNet), so
/// every front end refuses it before any model work: validate(GenerateParams)
/// for magi2 generate/refine, the C API and the server's jobs, plus the early
/// checks of magi2 serve (its 400), encode-text and enhance-prompt. Invalid
/// UTF-8 is not judged here: the tokenizer names it.
std::string prompt_problem(std::string_view prompt);

/// Throws Error "<what>: the prompt <prompt_problem(prompt)>: give a prompt
/// with some text" when the prompt is empty or only whitespace; `what` names
/// where it came from ("--prompt", "--prompt-file F", a request's label). The
/// CLI commands and validate(GenerateParams) share it; the server words the
/// same check as a 400 naming the JSON field.
void require_prompt(std::string_view prompt, const std::string& what);

/// The negative prompt: `flag_value` when non-empty, else the built-in
/// default (qwen35::default_negative_prompt()).
std::string negative_prompt_or_default(const std::string& flag_value);

/// A JSON library message made readable for one error line: drops the
/// "[json.exception...]" tag and the library's own "error" words, keeping the
/// position and the reason.
std::string plain_json_message(const std::string& what);

/// The tokenisation half of encode_prompt (same checks and errors; the
/// warnings go to stderr only when `warn`): what the memory plan counts.
qwen35::PreparedPrompt tokenize_prompt(const qwen35::Tokenizer& tok, const std::string& prompt, bool i2v,
                                       bool allow_truncate, const std::string& what, bool warn);

/// Encodes `prompt` with the official tokenizer limit; a prompt longer than
/// the limit is an Error unless `allow_truncate` (then it is cut as the
/// official code does and a "magi2: warning: ..." line goes to stderr).
/// Prompt JSON that looks like an object but does not parse is an Error
/// (strict policy: the official code would silently encode the raw text).
/// `what` names the prompt in messages ("--prompt", "sample 3", ...).
qwen35::TextFeatures encode_prompt(const qwen35::TextEncoder& enc, const std::string& prompt, bool i2v,
                                   bool allow_truncate, const std::string& what);

}  // namespace magi2
