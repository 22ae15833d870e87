#include "prompt_enhance/task.h"

#include <optional>

#include "core/error.h"
#include "prompt_enhance/embedded_data.h"

namespace magi2::pe {

const TaskSpec& task_spec(Task task) {
  static const TaskSpec t2v{Task::kT2V, "t2v", "T2VEnhanceResult", {"global_layer", "dynamic_layer"}};
  static const TaskSpec i2v{Task::kI2V,
                            "i2v",
                            "I2VEnhanceResult",
                            {"global_caption", "reference_bank", "shot_timeline", "audio_event_timeline",
                             "visible_text", "generation_requirements"}};
  return task == Task::kT2V ? t2v : i2v;
}

Task parse_task(std::string_view name, std::string_view flag) {
  if (name == "t2v") return Task::kT2V;
  if (name == "i2v") return Task::kI2V;
  throw Error(str_cat(flag, " '", name, "': expected t2v or i2v"));
}

const PyJson& response_schema(Task task) {
  static const PyJson all = [] {
    auto parsed = qwen35::py_json_loads(data::response_schemas_json);
    MAGI2_ASSERT(parsed.has_value() && parsed->contains("t2v") && parsed->contains("i2v"));
    return *parsed;
  }();
  return all.at(std::string(task_spec(task).name));
}

std::string_view builtin_template(Task task) { return task == Task::kT2V ? data::t2v_md : data::i2v_md; }

std::string fill_template(std::string_view template_text, std::string_view prompt) {
  auto replace_all = [](std::string s, std::string_view from, std::string_view to) {
    for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
      s.replace(at, from.size(), to);
    return s;
  };
  return replace_all(replace_all(std::string(template_text), "{user_input_text}", prompt), "{variation_seed}", "");
}

namespace {

// JSON Schema type names of a value; "integer" values are "number"s too.
bool has_type(const PyJson& v, std::string_view type) {
  if (type == "object") return v.is_object();
  if (type == "array") return v.is_array();
  if (type == "string") return v.is_string();
  if (type == "boolean") return v.is_boolean();
  if (type == "null") return v.is_null();
  if (type == "number") return v.is_number();
  if (type == "integer") {
    if (v.is_number_integer()) return true;
    if (!v.is_number_float()) return false;
    const double d = v.get<double>();
    return d == static_cast<double>(static_cast<int64_t>(d));
  }
  return false;
}

std::string_view type_name(const PyJson& v) {
  switch (v.type()) {
    case PyJson::value_t::object: return "object";
    case PyJson::value_t::array: return "array";
    case PyJson::value_t::string: return "string";
    case PyJson::value_t::boolean: return "boolean";
    case PyJson::value_t::null: return "null";
    case PyJson::value_t::number_float: return "number";
    default: return "integer";
  }
}

std::string where(const std::string& path) { return path.empty() ? "top level" : path; }

}  // namespace

std::string schema_violation(const PyJson& value, const PyJson& schema, const std::string& path) {
  if (!schema.is_object()) return "";
  if (auto t = schema.find("type"); t != schema.end()) {
    bool ok = false;
    std::string expected;
    if (t->is_string()) {
      ok = has_type(value, t->get<std::string>());
      expected = t->get<std::string>();
    } else if (t->is_array()) {
      for (const auto& n : *t) {
        if (!n.is_string()) continue;
        ok = ok || has_type(value, n.get<std::string>());
        expected += (expected.empty() ? "" : " or ") + n.get<std::string>();
      }
    } else {
      ok = true;
    }
    if (!ok) return str_cat(where(path), ": expected ", expected, ", got ", type_name(value));
  }
  if (auto e = schema.find("enum"); e != schema.end() && e->is_array()) {
    bool found = false;
    for (const auto& c : *e) found = found || c == value;
    if (!found) return str_cat(where(path), ": value ", value.dump(), " is not one of ", e->dump());
  }
  if (value.is_object()) {
    const auto props = schema.find("properties");
    if (auto r = schema.find("required"); r != schema.end() && r->is_array())
      for (const auto& k : *r)
        if (k.is_string() && !value.contains(k.get<std::string>()))
          return str_cat(where(path), ": missing key \"", k.get<std::string>(), "\"");
    const auto extra = schema.find("additionalProperties");
    const bool closed = extra != schema.end() && extra->is_boolean() && !extra->get<bool>();
    for (auto it = value.begin(); it != value.end(); ++it) {
      const std::string child = path.empty() ? it.key() : path + "." + it.key();
      if (props != schema.end() && props->is_object() && props->contains(it.key())) {
        std::string v = schema_violation(it.value(), props->at(it.key()), child);
        if (!v.empty()) return v;
      } else if (closed) {
        return str_cat(where(path), ": unexpected key \"", it.key(), "\"");
      }
    }
  }
  if (value.is_array()) {
    if (auto m = schema.find("minItems"); m != schema.end() && m->is_number_integer() &&
                                          static_cast<int64_t>(value.size()) < m->get<int64_t>())
      return str_cat(where(path), ": ", value.size(), " items, fewer than minItems ", m->get<int64_t>());
    if (auto m = schema.find("maxItems"); m != schema.end() && m->is_number_integer() &&
                                          static_cast<int64_t>(value.size()) > m->get<int64_t>())
      return str_cat(where(path), ": ", value.size(), " items, more than maxItems ", m->get<int64_t>());
    if (auto items = schema.find("items"); items != schema.end())
      for (size_t i = 0; i < value.size(); ++i) {
        std::string v = schema_violation(value[i], *items, str_cat(path, "[", i, "]"));
        if (!v.empty()) return v;
      }
  }
  return "";
}

void check_caption(const PyJson& caption, Task task, std::string_view what) {
  const TaskSpec& spec = task_spec(task);
  MAGI2_CHECK(caption.is_object(), what, ": a ", spec.name, " caption must be a JSON object, got ",
              type_name(caption));
  std::string missing;
  for (std::string_view k : spec.required_keys)
    if (!caption.contains(std::string(k))) missing += str_cat(missing.empty() ? "" : ", ", "\"", k, "\"");
  MAGI2_CHECK(missing.empty(), what, ": the ", spec.name, " caption lacks the required key(s) ", missing);
  const std::string v = schema_violation(caption, response_schema(task));
  MAGI2_CHECK(v.empty(), what, ": the ", spec.name, " caption does not follow the ", spec.schema_name,
              " schema: ", v);
}

}  // namespace magi2::pe
