// Prompt enhancement, offline parts: the caption -> Markdown renderer byte for
// byte against the official renderer's fixtures (../shared/golden/
// prompt_enhancement, cases.json), the embedded official schemas, the caption
// check, the template substitution and the request body.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "prompt_enhance/caption_markdown.h"
#include "prompt_enhance/enhancer.h"
#include "prompt_enhance/task.h"
#include "util/testing.h"

namespace magi2::test {
namespace {

using pe::PyJson;

std::string pe_dir() { return golden_dir() + "/prompt_enhancement"; }

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << path;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

PyJson parse(const std::string& text) {
  auto v = qwen35::py_json_loads(text);
  EXPECT_TRUE(v.has_value()) << text;
  return v.value_or(PyJson());
}

TEST(PeMarkdown, OfficialFixturesByteForByte) {
  const nlohmann::json cases = nlohmann::json::parse(slurp(pe_dir() + "/cases.json"));
  ASSERT_FALSE(cases.at("cases").empty());
  for (const auto& c : cases.at("cases")) {
    const std::string name = c.at("name");
    const std::string json = slurp(pe_dir() + "/" + c.at("json").get<std::string>());
    const std::string md = slurp(pe_dir() + "/" + c.at("markdown").get<std::string>());
    EXPECT_EQ(pe::render_caption_markdown_text(json, name), md) << name;
    // Every fixture caption follows its task's schema.
    const pe::Task task = pe::parse_task(c.at("task").get<std::string>(), "task");
    EXPECT_NO_THROW(pe::check_caption(parse(json), task, name)) << name;
  }
}

// Expected texts from the official render_markdown with the enhancer's
// options, run on these inputs (structures the schema-shaped fixtures lack).
TEST(PeMarkdown, GeneralStructures) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"a": {"flag": false, "n": 0, "x": 0.0, "e": "", "w": "  \u3000", "nil": null, "l": [], "o": {}}})",
       "# a\n\nflag:false\nn:0\nx:0.0\n"},
      {R"({"a": {"b": {"c": {"d": {"e": {"f": {"g": {"h": "deep"}}}}}}}})",
       "# a\n\n## b\n\n### c\n\n#### d\n\n##### e\n\n###### f\n\n*g*\n\nh:deep\n"},
      {R"({"root": [[1, 2], ["x", {"k": "v"}]]})",
       "# root\n\n## root1\n\nitem1:1\nitem2:2\n## root2\n\nitem1:x\n#### item2\n\nk:v\n"},
      {R"({"top": "t", "sec": {"nest": {"k": 1}, "s": "after", "lst": [1.5, 1e-05, 1e16, true, "a|b"]},
          "arr": [{"id": "o1", "tags": ["x", "y"]}, "plain"]})",
       "top:t\n\n# sec\n\ns:after\n\nlst:1.5 | 1e-05 | 1e+16 | true | a|b\n\n## nest\n\nk:1\n\n# arr\n\n## arr1\n\n"
       "id:o1\n\ntags:x | y\n\narr2:plain\n"},
      {R"([1, {"a": "b"}, [2]])", "item1:1\n## item2\n\na:b\n\n## item3\n\nitem1:2\n"},
      {"12.0", "12.0\n"},
      {R"({"a": {"b": "", "c": []}})", ""},
      {R"({"s": {"t": "tab\there\r\nnew\rcr  trail   "}})", "# s\n\nt:tab\\there\\nnew\\rcr  trail\n"},
      {R"({"": [{"a": 1}], "k": {"": "v"}})", "#\n\n## item1\n\na:1\n\n# k\n\n:v\n"},
      {R"({"k": {"dup": "first", "dup": "last"}})", "# k\n\ndup:last\n"},
  };
  for (const auto& [json, md] : cases) EXPECT_EQ(pe::render_caption_markdown_text(json, "case"), md) << json;
  EXPECT_TRUE(throws_with([] { pe::render_caption_markdown_text("{\"a\": ", "--caption-json x.json"); },
                          {"--caption-json x.json", "not valid JSON"}));
}

TEST(PeTask, EmbeddedSchemasAreTheOfficialOnes) {
  const PyJson golden = parse(slurp(pe_dir() + "/response_schemas.json"));
  EXPECT_EQ(pe::response_schema(pe::Task::kT2V), golden.at("t2v"));
  EXPECT_EQ(pe::response_schema(pe::Task::kI2V), golden.at("i2v"));
  for (pe::Task t : {pe::Task::kT2V, pe::Task::kI2V}) {
    // Required keys = the schema's top-level required list (the official TaskSpec).
    std::vector<std::string> req;
    for (const auto& k : pe::response_schema(t).at("required")) req.push_back(k.get<std::string>());
    std::vector<std::string> spec(pe::task_spec(t).required_keys.begin(), pe::task_spec(t).required_keys.end());
    EXPECT_EQ(spec, req);
    EXPECT_NE(pe::builtin_template(t).find("{user_input_text}"), std::string_view::npos);
  }
}

TEST(PeTask, CaptionCheckNamesTheFault) {
  const nlohmann::json cases = nlohmann::json::parse(slurp(pe_dir() + "/cases.json"));
  std::string t2v_name;
  for (const auto& c : cases.at("cases"))
    if (c.at("task") == "t2v") t2v_name = c.at("json");
  ASSERT_FALSE(t2v_name.empty());
  const PyJson good = parse(slurp(pe_dir() + "/" + t2v_name));
  EXPECT_TRUE(throws_with([&] { pe::check_caption(PyJson::array(), pe::Task::kT2V, "answer"); },
                          {"answer", "must be a JSON object"}));
  PyJson missing = good;
  missing.erase("dynamic_layer");
  EXPECT_TRUE(throws_with([&] { pe::check_caption(missing, pe::Task::kT2V, "answer"); },
                          {"answer", "lacks", "\"dynamic_layer\""}));
  PyJson wrong_type = good;
  wrong_type["global_layer"]["context"] = 3;
  EXPECT_TRUE(throws_with([&] { pe::check_caption(wrong_type, pe::Task::kT2V, "answer"); },
                          {"T2VEnhanceResult", "global_layer.context: expected string, got integer"}));
  PyJson extra = good;
  extra["global_layer"]["surprise"] = "x";
  EXPECT_TRUE(throws_with([&] { pe::check_caption(extra, pe::Task::kT2V, "answer"); },
                          {"global_layer: unexpected key \"surprise\""}));
  EXPECT_TRUE(throws_with([&] { pe::check_caption(good, pe::Task::kI2V, "answer"); }, {"i2v", "global_caption"}));
  EXPECT_TRUE(throws_with([] { pe::parse_task("t2a", "--task"); }, {"--task", "t2a", "t2v or i2v"}));
}

TEST(PeRequest, TemplateAndBody) {
  // Upstream replaces {user_input_text} first, then {variation_seed} everywhere.
  EXPECT_EQ(pe::fill_template("A {user_input_text} B {variation_seed}C {user_input_text}", "x{variation_seed}y"),
            "A xy B C xy");
  pe::EnhanceRequest req;
  req.prompt = "A fox in the snow.";
  req.template_text = "Write: {user_input_text}{variation_seed}";
  req.model = "m1";
  req.max_tokens = 123;
  const nlohmann::json body = nlohmann::json::parse(pe::chat_request_body(req, pe::Task::kT2V));
  EXPECT_EQ(body.at("model"), "m1");
  EXPECT_EQ(body.at("max_tokens"), 123);
  ASSERT_EQ(body.at("messages").size(), 1u);
  EXPECT_EQ(body["messages"][0]["role"], "user");
  EXPECT_EQ(body["messages"][0]["content"],
            nlohmann::json::parse(R"([{"type": "text", "text": "Write: A fox in the snow."}])"));
  const auto& rf = body.at("response_format");
  EXPECT_EQ(rf.at("type"), "json_schema");
  EXPECT_EQ(rf["json_schema"]["name"], "T2VEnhanceResult");
  EXPECT_EQ(rf["json_schema"]["strict"], true);
  EXPECT_EQ(rf["json_schema"]["schema"], nlohmann::json::parse(pe::response_schema(pe::Task::kT2V).dump()));
  req.prompt = "\xff";
  EXPECT_TRUE(throws_with([&] { pe::chat_request_body(req, pe::Task::kT2V); }, {"prompt"}));
}

}  // namespace
}  // namespace magi2::test
