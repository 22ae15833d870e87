#include "io/json_depth.h"

#include "core/error.h"

namespace magi2 {

int json_nesting_depth(std::string_view text, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;  // the escaped character cannot end the string
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > deepest) deepest = depth;
      if (deepest > limit) return deepest;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

void check_json_depth(std::string_view text, const std::string& what) {
  MAGI2_CHECK(json_nesting_depth(text) <= kMaxJsonDepth, what, ": JSON nested deeper than ", kMaxJsonDepth,
              " levels");
}

nlohmann::json parse_json_text(std::string_view text, const std::string& what) {
  check_json_depth(text, what);
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    throw Error(str_cat(what, " is not valid JSON (", e.what(), ")"));
  }
}

}  // namespace magi2
