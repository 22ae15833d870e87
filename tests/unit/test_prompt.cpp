// Prompt normalisation, I2VA figure augmentation, figure token selection and
// the default negative prompt against the golden qwen35_text_tiny prompts,
// plus the Python-semantics corner cases of the official renderer.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/safetensors.h"
#include "models/qwen35/prompt.h"
#include "models/qwen35/prompt_pyjson.h"
#include "util/testing.h"

namespace magi2::qwen35 {
namespace {

using nlohmann::json;

std::string fixture_dir() { return test::golden_dir() + "/qwen35_text_tiny"; }

json golden_prompts() {
  std::ifstream f(fixture_dir() + "/prompts.json");
  EXPECT_TRUE(f.good());
  return json::parse(f);
}

std::vector<int64_t> golden_ints(const std::string& name) {
  auto f = SafetensorsFile::open(fixture_dir() + "/text_io.safetensors");
  Tensor t = f->tensor(name);
  const int64_t* p = t.data_as<int64_t>();
  return std::vector<int64_t>(p, p + t.numel());
}

TEST(GoldenPrompts, AugmentationAndNormalisationExact) {
  const json prompts = golden_prompts();
  ASSERT_EQ(prompts.size(), 12u);
  for (const auto& p : prompts) {
    const std::string name = p.at("name").get<std::string>();
    SCOPED_TRACE(name);
    const std::string raw = p.at("raw_prompt").get<std::string>();
    const bool i2v = p.at("i2v").get<bool>();
    const std::string encoded = i2v ? ensure_figure_token(raw) : raw;
    EXPECT_EQ(encoded, p.at("encoded_prompt").get<std::string>());
    EXPECT_EQ(normalize_prompt(encoded), p.at("normalized_prompt").get<std::string>());
  }
}

TEST(GoldenPrompts, PreparedPromptAndFigureTokens) {
  auto tok = Tokenizer::load(fixture_dir() + "/text_encoder");
  for (const auto& p : golden_prompts()) {
    const std::string name = p.at("name").get<std::string>();
    SCOPED_TRACE(name);
    EncodeOptions opt;
    opt.allow_empty = p.at("raw_prompt").get<std::string>().empty();
    const bool i2v = p.at("i2v").get<bool>();
    const PreparedPrompt pp = prepare_prompt(*tok, p.at("raw_prompt").get<std::string>(), i2v, opt);
    EXPECT_EQ(pp.normalized, p.at("normalized_prompt").get<std::string>());
    EXPECT_EQ(pp.encoding.ids, golden_ints(name + "_input_ids"));
    if (i2v) {
      const auto expect = p.at("figure_token_indices").get<std::vector<int64_t>>();
      EXPECT_EQ(pp.figure_indices, expect);
      EXPECT_EQ(pp.figure_indices, golden_ints(name + "_figure_token_indices"));
    } else {
      EXPECT_TRUE(pp.figure_indices.empty());
    }
  }
}

TEST(GoldenPrompts, DefaultNegativePromptVerbatim) {
  const std::string_view neg = default_negative_prompt();
  EXPECT_EQ(neg.size(), 1721u);
  EXPECT_EQ(neg.substr(0, 13), "Bright tones,");
  EXPECT_EQ(neg.substr(neg.size() - 18), "autotune artifacts");
  for (const auto& p : golden_prompts()) {
    if (p.at("name") == "negative") {
      EXPECT_EQ(neg, p.at("raw_prompt").get<std::string>());
    }
  }
  EXPECT_EQ(normalize_prompt(neg), neg);
}

TEST(FigureTokens, OverlapRules) {
  // offsets of "ab <Figure 1>" split as: "ab", " <", "Figure", " 1", ">"; index 2 tagged (0,0).
  const std::string text = "ab <Figure 1>";
  std::vector<CpRange> offs = {{0, 2}, {2, 4}, {4, 10}, {10, 12}, {12, 13}};
  EXPECT_EQ(figure_token_indices(text, offs), (std::vector<int64_t>{1, 2, 3, 4}));
  offs[2] = {0, 0};
  EXPECT_EQ(figure_token_indices(text, offs), (std::vector<int64_t>{1, 3, 4}));
  EXPECT_TRUE(figure_token_indices("no figure here", offs).empty());
  EXPECT_TRUE(figure_token_indices(text, offs, "").empty());
  // Code-point (not byte) positions: a 3-byte character before the target.
  EXPECT_EQ(figure_token_indices("\xE4\xBD\xA0<Figure 1>", {{0, 1}, {1, 2}, {2, 11}}), (std::vector<int64_t>{1, 2}));
}

TEST(Normalize, PlainAndNonObjectJsonUnchanged) {
  EXPECT_EQ(normalize_prompt("A cat. {not json"), "A cat. {not json");
  EXPECT_EQ(normalize_prompt("[1, 2, 3]"), "[1, 2, 3]");
  EXPECT_EQ(normalize_prompt("  42 "), "  42 ");
  EXPECT_EQ(normalize_prompt("\"quoted\""), "\"quoted\"");
  EXPECT_EQ(normalize_prompt("{\"global_layer\": {}}"), "{\"global_layer\": {}}");  // stripped away
  EXPECT_EQ(normalize_prompt("\xEF\xBB\xBF{\"global_layer\": {\"context\": \"x\"}}"),
            "\xEF\xBB\xBF{\"global_layer\": {\"context\": \"x\"}}");  // Python rejects a BOM
}

TEST(Normalize, PythonValueSemantics) {
  // Non-string values go through Python str(); whitespace runs collapse (incl. U+3000, U+0085).
  const std::string p = R"({"global_layer": {"context": ["a", "it's", {"k": null, "n": 1.5e-7}], )"
                        R"("description": "x\u3000\u0085 y", "aesthetics": {"style": true, "mood_atmosphere": 1e16, )"
                        R"("color_scheme": 2.0}, "audio_baseline": {"dialogue": {"speaker_tags": ""}}}, )"
                        R"("reference_layer": [" ", {"a": [1, "b\n"]}, 7]})";
  EXPECT_EQ(normalize_prompt(p),
            "context: ['a', \"it's\", {'n': 1.5e-07}]\nx y\n"
            "aesthetics: style=True; mood=1e+16; color=2.0\naudio: speakers=\n{'a': [1, 'b\\n']}\n7");
}

TEST(Normalize, SubjectsObjectsTimelineEdgeCases) {
  const std::string p = R"({"global_layer": {"description": "only desc",
      "alive_subjects_static": [{"description": "d", "orientation": "o",
         "visual_attributes": {"clothing": " ", "gender": "f", "extra": "ignored"}}, 5],
      "objects_static": [{"object_id": "<o>"}]},
    "dynamic_layer": {"timeline_segments": [
      {"segment_basic_info": {"timestamp_range": "0-1"},
       "audio": {"dialogue_lines": [{"text": "hi", "speaker": null}, "x"]},
       "alive_subjects": "abc", "objects": {"k": 1}}]},
    "reference_layer": ["line\nwith newline"]})";
  EXPECT_EQ(normalize_prompt(p),
            "context\nonly desc\nsubjects:\n - d (o) :: gender=f\nobjects:\n - <o>\ntimeline:\n - 0-1\n"
            "   - dialogue: hi\nline\nwith newline");
}

TEST(Normalize, OfficialTypeErrorKeepsRawPrompt) {
  // Iterating a number raises TypeError in the official renderer; _normalize_prompt keeps the raw text.
  const std::string p = R"({"global_layer": {"context": "c"}, "dynamic_layer": {"timeline_segments": [{"objects": 3}]}})";
  EXPECT_EQ(normalize_prompt(p), p);
  EXPECT_TRUE(test::throws_with([&] { json_to_compact_markdown(p); }, {"TypeError"}));
  // Zero is falsy, so `0 or []` iterates nothing.
  const std::string z = R"({"global_layer": {"context": "c"}, "dynamic_layer": {"timeline_segments": [{"objects": 0}]}})";
  EXPECT_EQ(normalize_prompt(z), "context: c\ntimeline:\n -");
}

TEST(Normalize, MalformedJsonErrors) {
  EXPECT_TRUE(test::throws_with([] { json_to_compact_markdown("{\"global_layer\": "); }, {"prompt JSON is malformed"}));
  EXPECT_TRUE(test::throws_with([] { normalize_prompt(" {\"a\": 1,}", JsonPromptPolicy::kStrict); },
                                {"prompt looks like a JSON object but is malformed"}));
  EXPECT_EQ(normalize_prompt(" {\"a\": 1,}"), " {\"a\": 1,}");                        // official: as-is
  EXPECT_EQ(normalize_prompt("[x] plain", JsonPromptPolicy::kStrict), "[x] plain");  // not an object
  EXPECT_TRUE(test::throws_with([] { normalize_prompt("bad \xC3"); }, {"prompt is not valid UTF-8"}));
  EXPECT_EQ(json_to_compact_markdown(" {\"a\": 1} "), " {\"a\": 1} ");  // no global_layer
}

TEST(FigureAugmentation, ObjectListAndText) {
  EXPECT_EQ(ensure_figure_token("a dog"), "a dogreference_layer:The first frame refers to <Figure 1>");
  EXPECT_EQ(ensure_figure_token("[1]"), "[1]reference_layer:The first frame refers to <Figure 1>");
  EXPECT_EQ(ensure_figure_token("{bad"), "{bad" + std::string("reference_layer:") + std::string(kFigureSentence));
  // Existing key keeps its position; json.dumps spacing, escapes and float repr.
  EXPECT_EQ(ensure_figure_token(R"({"reference_layer": "x", "b": [1.0, 1e300, null, true], "c": "q\"\\\n\u0001\u00e9"})"),
            "{\"reference_layer\": [\"The first frame refers to <Figure 1>\"], \"b\": [1.0, 1e+300, null, true], "
            "\"c\": \"q\\\"\\\\\\n\\u0001\xC3\xA9\"}");
  EXPECT_EQ(ensure_figure_token("{}"), "{\"reference_layer\": [\"The first frame refers to <Figure 1>\"]}");
}

TEST(PyJson, FloatRepr) {
  EXPECT_EQ(py_float_repr(0.0), "0.0");
  EXPECT_EQ(py_float_repr(-0.0), "-0.0");
  EXPECT_EQ(py_float_repr(1.5), "1.5");
  EXPECT_EQ(py_float_repr(0.1), "0.1");
  EXPECT_EQ(py_float_repr(1e15), "1000000000000000.0");
  EXPECT_EQ(py_float_repr(1e16), "1e+16");
  EXPECT_EQ(py_float_repr(1.25e17), "1.25e+17");
  EXPECT_EQ(py_float_repr(0.0001), "0.0001");
  EXPECT_EQ(py_float_repr(0.00001), "1e-05");
  EXPECT_EQ(py_float_repr(123456.789), "123456.789");
  EXPECT_EQ(py_float_repr(1e-300), "1e-300");
}

TEST(PyJson, StrReprAndDuplicateKeys) {
  EXPECT_EQ(py_str(PyJson::parse(R"(["a'b", "a\"b", "a'\"b", "\t\u00a0\u00e9\u200b\ud83d\ude00"])")),
            "[\"a'b\", 'a\"b', 'a\\'\"b', '\\t\\xa0\xC3\xA9\\u200b\xF0\x9F\x98\x80']");
  EXPECT_EQ(py_str(PyJson::parse("{\"z\": 1, \"a\": [true, false, null], \"m\": -3}")),
            "{'z': 1, 'a': [True, False, None], 'm': -3}");
  // Python keeps the first position and the last value of a duplicate key.
  const auto v = py_json_loads(R"({"a": 1, "b": 2, "a": 3})");
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(py_json_dumps(*v), R"({"a": 3, "b": 2})");
  EXPECT_FALSE(py_json_loads("{'a': 1}").has_value());
  EXPECT_FALSE(py_json_loads("").has_value());
}

}  // namespace
}  // namespace magi2::qwen35
