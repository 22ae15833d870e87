// One nesting limit for every JSON text the engine reads (configs, indexes,
// safetensors headers, tokenizer.json, prompts, --samples). nlohmann's parser
// is iterative, but dump(), comparisons and our own walkers (the prompt
// renderer, Python-style str()) recurse, so a hostile file of a few kB of
// "[[[[..." would overflow the stack; checking the depth on the raw text first
// keeps every later walk bounded.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

namespace magi2 {

/// Deepest array/object nesting accepted anywhere. The official files nest at
/// most ~6 levels (tokenizer.json, enhanced prompts); Python's json module
/// gives up near 1000.
constexpr int kMaxJsonDepth = 128;

/// Nesting depth of the arrays/objects in a JSON text, scanning it once
/// (strings and their escapes skipped; not a validator: malformed text still
/// gets a number and is left to the parser to refuse). Stops counting at
/// `limit + 1`.
int json_nesting_depth(std::string_view text, int limit = kMaxJsonDepth);

/// Throws magi2::Error "WHAT: JSON nested deeper than 128 levels" when the
/// text nests deeper than kMaxJsonDepth. Call before parsing.
void check_json_depth(std::string_view text, const std::string& what);

/// check_json_depth, then parses: the value, or Error "WHAT is not valid JSON
/// (<the parser's message with its byte position>)".
nlohmann::json parse_json_text(std::string_view text, const std::string& what);

}  // namespace magi2
