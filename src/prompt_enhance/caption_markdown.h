// The official caption -> Markdown renderer of prompt enhancement
// (SandAI-org/MAGI-2-preview f68a0f9, inference/prompt_enhancement/pe_markdown.py
// `render_markdown`), reimplemented on Python-compatible JSON values. The
// enhanced prompt the text encoder receives is exactly this Markdown.
#pragma once

#include <string>
#include <string_view>

#include "models/qwen35/prompt_pyjson.h"

namespace magi2::pe {

using qwen35::PyJson;

/// The renderer's options, defaulting to those the official enhancer passes
/// (`PromptEnhancer.enhance`): drop empty values, no empty or whitespace-only
/// strings, section leaf keys kept, strings unquoted and not collapsed,
/// " | " between inline list items, headings down to level 6, scalar fields
/// before nested sections. (The official function's own defaults differ in
/// omit_section_leaf_keys only.)
struct MarkdownOptions {
  bool drop_empty = true;                 ///< drop null / [] / {} / blank strings, recursively
  bool keep_empty_string = false;         ///< with drop_empty: keep "" and whitespace-only strings
  bool omit_section_leaf_keys = false;    ///< print bare values for primitives directly under a root key
  bool quote_strings = false;             ///< strings as JSON literals (json.dumps, ensure_ascii=False)
  bool collapse_string_whitespace = false;///< runs of whitespace -> one space (else \n, \r, \t escaped)
  std::string primitive_list_separator = " | ";
  int max_heading_level = 6;              ///< deeper headings become *bold* labels
  bool group_scalar_fields_first = true;  ///< per object: one-line fields first, then nested ones
};

/// Renders a parsed caption (any JSON value, parsed with Python json.loads
/// semantics: key order kept, duplicate keys last-wins) to Markdown: root keys
/// as "# key" sections, nested objects as deeper headings, arrays of objects
/// as numbered subsections ("## key1"), primitive arrays inline, primitives as
/// "key:value". Returns "" when nothing survives the empty-value filter, else
/// text ending in exactly one "\n" (lines right-stripped, at most one blank
/// line in a row). Numbers print as Python's json.dumps (floats as repr).
/// Errors: magi2::Error for strings that are not valid UTF-8.
std::string render_caption_markdown(const PyJson& caption, const MarkdownOptions& opt = {});

/// Parses `json_text` (Python json.loads semantics, surrounding whitespace
/// allowed) and renders it. Errors: magi2::Error "<what> is not valid JSON:
/// <parser message>".
std::string render_caption_markdown_text(std::string_view json_text, std::string_view what,
                                         const MarkdownOptions& opt = {});

}  // namespace magi2::pe
