#include "prompt_enhance/caption_markdown.h"

#include <optional>
#include <utility>
#include <vector>

#include "core/error.h"
#include "models/qwen35/tok_unicode.h"

namespace magi2::pe {

namespace {

using qwen35::py_float_repr;
using qwen35::py_json_dumps;
using qwen35::py_rstrip;
using qwen35::py_strip;

bool is_primitive(const PyJson& v) { return !v.is_object() && !v.is_array(); }

bool all_primitives(const PyJson& list) {
  for (const auto& e : list)
    if (!is_primitive(e)) return false;
  return true;
}

// A field that renders as one "key:value" line: a primitive or a list of
// primitives (the official `child_is_simple_for_line`).
bool one_line_field(const PyJson& v) { return is_primitive(v) || (v.is_array() && all_primitives(v)); }

// The official `filter_empty`: nullopt where the value carries no information.
// False, 0 and 0.0 are information and stay.
std::optional<PyJson> filter_empty(const PyJson& v, bool keep_empty_string) {
  if (v.is_null()) return std::nullopt;
  if (v.is_string()) {
    if (keep_empty_string || !py_strip(v.get_ref<const std::string&>()).empty()) return v;
    return std::nullopt;
  }
  if (v.is_object()) {
    PyJson out = PyJson::object();
    for (auto it = v.begin(); it != v.end(); ++it)
      if (auto c = filter_empty(it.value(), keep_empty_string)) out[it.key()] = std::move(*c);
    if (out.empty()) return std::nullopt;
    return out;
  }
  if (v.is_array()) {
    PyJson out = PyJson::array();
    for (const auto& e : v)
      if (auto c = filter_empty(e, keep_empty_string)) out.push_back(std::move(*c));
    if (out.empty()) return std::nullopt;
    return out;
  }
  return v;
}

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
}

class Renderer {
 public:
  explicit Renderer(const MarkdownOptions& opt) : opt_(opt) {}

  std::vector<std::string> lines;

  // The official `render_value`: `key` is nullopt for list items and the root.
  // `root_depth` is the object depth below the document (1: a root section).
  void value(const std::optional<std::string>& key, const PyJson& v, int level, int root_depth) {
    if (is_primitive(v)) {
      const std::string text = primitive(v);
      if (!key || (opt_.omit_section_leaf_keys && root_depth == 1)) {
        lines.push_back(text);
      } else {
        lines.push_back(*key + ":" + text);
      }
      return;
    }
    if (v.is_array()) {
      if (v.empty()) return;
      if (key) {
        if (all_primitives(v)) {
          lines.push_back(*key + ":" + inline_list(v));
          return;
        }
        lines.push_back(heading(level, *key));
        lines.emplace_back();
      }
      // Python `if key`: an empty key names items like a missing one.
      const std::string stem = key && !key->empty() ? *key : "item";
      int idx = 0;
      for (const auto& item : v) {
        const std::string title = stem + std::to_string(++idx);
        if (is_primitive(item)) {
          lines.push_back(title + ":" + primitive(item));
        } else if (item.is_array()) {
          lines.push_back(heading(level + 1, title));
          lines.emplace_back();
          value(std::nullopt, item, level + 2, root_depth + 1);
        } else {
          lines.push_back(heading(level + 1, title));
          lines.emplace_back();
          object_contents(item, level + 2, root_depth + 1);
          lines.emplace_back();
        }
      }
      return;
    }
    const int step = key ? 1 : 0;
    if (key) {
      lines.push_back(heading(level, *key));
      lines.emplace_back();
    }
    object_contents(v, level + step, root_depth + step);
  }

  // The official `render_object_contents`: one-line fields first (when
  // grouping), a blank line before every nested field that is not first.
  void object_contents(const PyJson& obj, int level, int root_depth) {
    std::vector<std::pair<const std::string*, const PyJson*>> order;
    for (auto it = obj.begin(); it != obj.end(); ++it)
      if (!opt_.group_scalar_fields_first || one_line_field(it.value())) order.emplace_back(&it.key(), &it.value());
    if (opt_.group_scalar_fields_first)
      for (auto it = obj.begin(); it != obj.end(); ++it)
        if (!one_line_field(it.value())) order.emplace_back(&it.key(), &it.value());
    bool first = true;
    for (const auto& [key, child] : order) {
      if (!first && !is_primitive(*child) && !lines.empty() && !lines.back().empty()) lines.emplace_back();
      value(*key, *child, level, root_depth);
      first = false;
    }
  }

 private:
  const MarkdownOptions& opt_;

  std::string heading(int level, const std::string& title) const {
    if (level <= opt_.max_heading_level) return std::string(static_cast<size_t>(std::max(1, level)), '#') + " " + title;
    return "*" + title + "*";
  }

  // The official `primitive_to_text`.
  std::string primitive(const PyJson& v) const {
    switch (v.type()) {
      case PyJson::value_t::string: {
        std::string s = v.get<std::string>();
        if (opt_.collapse_string_whitespace) {
          s = qwen35::py_collapse_whitespace(s);
        } else {
          replace_all(s, "\r\n", "\\n");
          replace_all(s, "\n", "\\n");
          replace_all(s, "\r", "\\r");
          replace_all(s, "\t", "\\t");
        }
        return opt_.quote_strings ? py_json_dumps(PyJson(s)) : s;
      }
      case PyJson::value_t::null: return "null";
      case PyJson::value_t::boolean: return v.get<bool>() ? "true" : "false";
      case PyJson::value_t::number_integer: return std::to_string(v.get<int64_t>());
      case PyJson::value_t::number_unsigned: return std::to_string(v.get<uint64_t>());
      case PyJson::value_t::number_float: return py_float_repr(v.get<double>());
      default: break;
    }
    MAGI2_ASSERT(false);
    return {};
  }

  // The official `render_inline_list`, reached only for lists of primitives.
  std::string inline_list(const PyJson& list) const {
    std::string out;
    bool first = true;
    for (const auto& e : list) {
      if (!first) out += opt_.primitive_list_separator;
      first = false;
      out += primitive(e);
    }
    return out;
  }
};

// The official `normalize_blank_lines` with at most one blank line in a row.
std::string join_lines(const std::vector<std::string>& lines) {
  std::vector<std::string> out;
  int blanks = 0;
  for (const auto& l : lines) {
    if (l.empty()) {
      if (++blanks <= 1) out.emplace_back();
    } else {
      blanks = 0;
      out.push_back(py_rstrip(l));
    }
  }
  while (!out.empty() && out.back().empty()) out.pop_back();
  std::string text;
  for (size_t i = 0; i < out.size(); ++i) {
    if (i) text += "\n";
    text += out[i];
  }
  return text + "\n";
}

}  // namespace

std::string render_caption_markdown(const PyJson& caption, const MarkdownOptions& opt) {
  std::optional<PyJson> kept = caption;
  if (opt.drop_empty) {
    kept = filter_empty(caption, opt.keep_empty_string);
    if (!kept) return "";
  }
  Renderer r(opt);
  if (kept->is_object()) {
    bool first = true;
    for (auto it = kept->begin(); it != kept->end(); ++it) {
      if (!first) r.lines.emplace_back();
      first = false;
      r.value(it.key(), it.value(), 1, 0);
    }
  } else {
    r.value(std::nullopt, *kept, 1, 0);
  }
  return join_lines(r.lines);
}

std::string render_caption_markdown_text(std::string_view json_text, std::string_view what,
                                         const MarkdownOptions& opt) {
  std::string err;
  const std::optional<PyJson> parsed = qwen35::py_json_loads(json_text, &err);
  MAGI2_CHECK(parsed.has_value(), what, " is not valid JSON: ", err);
  return render_caption_markdown(*parsed, opt);
}

}  // namespace magi2::pe
