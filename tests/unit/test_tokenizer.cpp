// Qwen3.5 tokenizer against the golden qwen35_text_tiny fixtures (ids and
// offsets of every prompt, exactly), the MAGI CJK split probe, truncation,
// added tokens, NFC alignment and error cases.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "engine/params.h"
#include "engine/text_conditioning.h"
#include "io/safetensors.h"
#include "models/qwen35/prompt.h"
#include "models/qwen35/tokenizer.h"
#include "util/testing.h"

namespace magi2::qwen35 {
namespace {

using nlohmann::json;

std::string fixture_dir() { return test::golden_dir() + "/qwen35_text_tiny"; }

json read_json(const std::string& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << path;
  return json::parse(f);
}

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

class GoldenTokenizer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tok_ = Tokenizer::load(fixture_dir() + "/text_encoder");
    prompts_ = new json(read_json(fixture_dir() + "/prompts.json"));
    meta_ = new json(read_json(fixture_dir() + "/meta.json"));
    io_ = SafetensorsFile::open(fixture_dir() + "/text_io.safetensors");
  }
  static void TearDownTestSuite() {
    tok_.reset();
    delete prompts_;
    delete meta_;
    io_.reset();
  }
  static std::vector<int64_t> ints(const std::string& name) {
    Tensor t = io_->tensor(name);
    const int64_t* p = t.data_as<int64_t>();
    return std::vector<int64_t>(p, p + t.numel());
  }

  static std::shared_ptr<const Tokenizer> tok_;
  static json* prompts_;
  static json* meta_;
  static std::shared_ptr<SafetensorsFile> io_;
};
std::shared_ptr<const Tokenizer> GoldenTokenizer::tok_;
json* GoldenTokenizer::prompts_ = nullptr;
json* GoldenTokenizer::meta_ = nullptr;
std::shared_ptr<SafetensorsFile> GoldenTokenizer::io_;

TEST_F(GoldenTokenizer, EveryPromptIdsAndOffsetsExact) {
  ASSERT_EQ(prompts_->size(), 12u);
  for (const auto& p : *prompts_) {
    const std::string name = p.at("name").get<std::string>();
    SCOPED_TRACE(name);
    const std::string text = p.at("normalized_prompt").get<std::string>();
    EncodeOptions opt;
    opt.allow_empty = text.empty();
    const Encoding enc = tok_->encode(text, opt);
    const std::vector<int64_t> ids = ints(name + "_input_ids");
    const std::vector<int64_t> offs = ints(name + "_offsets");
    ASSERT_EQ(static_cast<int64_t>(ids.size()), p.at("num_tokens").get<int64_t>());
    EXPECT_EQ(enc.ids, ids);
    ASSERT_EQ(enc.offsets.size() * 2, offs.size());
    for (size_t i = 0; i < enc.offsets.size(); ++i) {
      EXPECT_EQ(enc.offsets[i].first, offs[2 * i]) << "token " << i;
      EXPECT_EQ(enc.offsets[i].second, offs[2 * i + 1]) << "token " << i;
    }
    EXPECT_FALSE(enc.truncated());
    EXPECT_EQ(enc.num_dropped_bytes, 0);
    EXPECT_EQ(enc.attention_mask, std::vector<int64_t>(ids.size(), 1));
  }
}

TEST_F(GoldenTokenizer, TokenCountsWithoutCjkSplit) {
  // The plain HF tokenizer (no MAGI split) gives the counts the oracle measured.
  auto plain = Tokenizer::load(fixture_dir() + "/text_encoder", /*magi_cjk_split=*/false);
  const json& counts = meta_->at("token_count_without_cjk_split");
  for (const auto& p : *prompts_) {
    const std::string name = p.at("name").get<std::string>();
    EncodeOptions opt;
    opt.allow_empty = true;
    EXPECT_EQ(static_cast<int64_t>(plain->encode(p.at("normalized_prompt").get<std::string>(), opt).size()),
              counts.at(name).get<int64_t>())
        << name;
  }
}

TEST_F(GoldenTokenizer, CjkSplitProbe) {
  const json& probe = meta_->at("cjk_split_probe");
  EXPECT_EQ(probe.at("pattern").get<std::string>(), kMagiCjkSplitPattern);
  PreTokenizer cjk = PreTokenizer::from_json(json(), "probe");
  cjk.prepend_split(kMagiCjkSplitPattern, SplitBehavior::kIsolated, false, "probe");

  const std::string sample = probe.at("sample").get<std::string>();
  std::vector<std::string> pieces;
  for (const auto& r : cjk.split(sample)) pieces.push_back(sample.substr(r.first, r.second - r.first));
  EXPECT_EQ(pieces, probe.at("sample_pre_tokens").get<std::vector<std::string>>());

  const std::string isolated = probe.at("isolated_ascii").get<std::string>();
  for (int c = 0x20; c < 0x7F; ++c) {
    const std::string s = std::string("~") + static_cast<char>(c) + "~";
    const bool expect = isolated.find(static_cast<char>(c)) != std::string::npos;
    EXPECT_EQ(cjk.split(s).size(), expect ? 3u : 1u) << "char " << static_cast<char>(c);
  }
  for (const auto& [key, expect] : probe.at("isolated_codepoints").items()) {
    const char32_t cp = static_cast<char32_t>(std::stoul(key.substr(2), nullptr, 16));
    std::string s = "~";
    utf8_append(s, cp);
    s += "~";
    EXPECT_EQ(cjk.split(s).size(), expect.get<bool>() ? 3u : 1u) << key;
  }
}

TEST_F(GoldenTokenizer, TruncationAtOfficialMaxLengthIsReported) {
  const std::string en = (*prompts_)[0].at("normalized_prompt").get<std::string>();
  const Encoding full = tok_->encode(en);
  EncodeOptions opt;
  opt.max_length = 10;
  const Encoding cut = tok_->encode(en, opt);
  ASSERT_EQ(cut.size(), 10u);
  EXPECT_TRUE(cut.truncated());
  EXPECT_EQ(cut.num_truncated, static_cast<int64_t>(full.size()) - 10);
  EXPECT_EQ(cut.untruncated_length, static_cast<int64_t>(full.size()));
  EXPECT_EQ(std::vector<int64_t>(full.ids.begin(), full.ids.begin() + 10), cut.ids);

  // Ten negative prompts (735 tokens each, minus merges across the joins) pass 7000.
  std::string big;
  for (int i = 0; i < 10; ++i) big += std::string(default_negative_prompt()) + ", ";
  const Encoding e = tok_->encode(big);
  EXPECT_EQ(static_cast<int64_t>(e.size()), kOfficialMaxLength);
  EXPECT_GT(e.num_truncated, 0);
  EXPECT_EQ(e.untruncated_length, kOfficialMaxLength + e.num_truncated);
  opt.truncation = false;
  EXPECT_EQ(static_cast<int64_t>(tok_->encode(big, opt).size()), e.untruncated_length);
}

TEST_F(GoldenTokenizer, SpecialTokensAreSplitOutFirst) {
  const std::string text = "<|im_start|>user 你好<|im_end|>\n<|endoftext|>";
  const Encoding e = tok_->encode(text);
  ASSERT_GE(e.size(), 5u);
  EXPECT_EQ(e.ids.front(), 1201);
  EXPECT_EQ(e.offsets.front(), CpRange(0, 12));
  EXPECT_EQ(e.ids.back(), 1200);
  EXPECT_EQ(e.offsets.back(), CpRange(30, 43));
  int found_end = 0;
  for (size_t i = 0; i < e.size(); ++i)
    if (e.ids[i] == 1202) {
      ++found_end;
      EXPECT_EQ(e.offsets[i], CpRange(19, 29));
    }
  EXPECT_EQ(found_end, 1);
  EXPECT_EQ(tok_->decode(e.ids), text);
  EXPECT_EQ(tok_->decode(e.ids, /*skip_special_tokens=*/true), "user 你好\n");
  EXPECT_EQ(tok_->token_to_id("<|im_end|>"), 1202);
  EXPECT_EQ(tok_->id_to_token(1201), "<|im_start|>");
  EXPECT_EQ(tok_->num_special_tokens_to_add(), 0);
}

TEST_F(GoldenTokenizer, DecodeRoundTrip) {
  for (const auto& p : *prompts_) {
    const std::string text = p.at("normalized_prompt").get<std::string>();
    if (text.empty() || !nfc_trivially_stable(utf8_decode(text, "t"))) continue;
    EXPECT_EQ(tok_->decode(tok_->encode(text).ids), text) << p.at("name");
  }
}

TEST_F(GoldenTokenizer, MatchesHfTokenizersOnTrickyText) {
  // Expected values from tokenizers 0.23.3 (Tokenizer.from_file on the golden
  // tokenizer.json with the MAGI CJK split prepended), recorded by hand.
  struct Case {
    const char* text;
    std::vector<int64_t> ids;
    std::vector<CpRange> offs;
  };
  const std::vector<Case> cases = {
      // HF NFC has Unicode 9 data: U+1DF9 (Unicode 10) is not reordered, U+0316 is.
      {"q\u0300\u1DF9 x\u0301\u0316",
       {80, 136, 222, 157, 115, 117, 220, 87, 136, 244, 136, 223},
       {{0, 1}, {1, 2}, {1, 2}, {2, 3}, {2, 3}, {2, 3}, {3, 4}, {4, 5}, {5, 6}, {5, 6}, {6, 7}, {6, 7}}},
      // U+31CC7 (CJK Ext H, Unicode 15) is a letter for Oniguruma.
      {"j\U00031CC7:b\u0653", {73, 172, 109, 111, 229, 25, 65, 149, 241},
       {{0, 1}, {1, 2}, {1, 2}, {1, 2}, {1, 2}, {2, 3}, {3, 4}, {4, 5}, {4, 5}}},
      {"It'S '\u017F 's DON'T", {40, 83, 6, 50, 220, 6, 129, 123, 220, 6, 82, 220, 35, 46, 45, 6, 51},
       {{0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 5}, {5, 6}, {6, 7}, {6, 7}, {7, 8}, {8, 9}, {9, 10}, {10, 11},
        {11, 12}, {12, 13}, {13, 14}, {14, 15}, {15, 16}}},
      // NEL is \s for Oniguruma; U+3000 / U+2028 too.
      {"a\u0085b \u3000\u2028x\r\n\n y", {64, 126, 227, 65, 220, 430, 222, 819, 101, 87, 201, 317, 823},
       {{0, 1}, {1, 2}, {1, 2}, {2, 3}, {3, 4}, {4, 5}, {4, 5}, {5, 6}, {5, 6}, {6, 7}, {7, 8}, {8, 10}, {10, 12}}},
      // CJK compatibility ideograph and Hangul LV + T compose under NFC.
      {"\uF900\uAC00\u11A8 \u212B", {164, 109, 230, 166, 108, 223, 220, 127, 227},
       {{0, 1}, {0, 1}, {0, 1}, {1, 2}, {1, 2}, {1, 2}, {3, 4}, {4, 5}, {4, 5}}},
      {"x\u0344", {157, 118, 235, 136, 223}, {{0, 1}, {0, 1}, {0, 1}, {1, 2}, {1, 2}}},
  };
  for (const Case& c : cases) {
    const Encoding e = tok_->encode(c.text);
    EXPECT_EQ(e.ids, c.ids) << c.text;
    EXPECT_EQ(e.offsets, c.offs) << c.text;
  }
}

TEST(Nfc, AlignmentLikeHfNormalizer) {
  // "e" + COMBINING ACUTE composes; the result is aligned to "e" only.
  const std::u32string in = U"cafe\u0301!";
  const NfcResult r = nfc_with_alignment(in, 10);
  EXPECT_EQ(r.text, U"caf\u00E9!");
  ASSERT_EQ(r.align.size(), 5u);
  EXPECT_EQ(r.align[3], CpRange(13, 14));
  EXPECT_EQ(r.align[4], CpRange(15, 16));
  // Singleton decomposition (ANGSTROM SIGN -> A WITH RING) and Hangul L+V+T.
  EXPECT_EQ(nfc_with_alignment(U"\u212B", 0).text, U"\u00C5");
  EXPECT_EQ(nfc_with_alignment(U"\u1100\u1161\u11A8", 0).text, U"\uAC01");
  // U+0344 decomposes into two marks that do not recompose: the second shares the first's alignment.
  const NfcResult d = nfc_with_alignment(U"q\u0344", 0);
  ASSERT_EQ(d.text, U"q\u0308\u0301");
  EXPECT_EQ(d.align[1], CpRange(1, 2));
  EXPECT_EQ(d.align[2], CpRange(1, 2));
  const NfcResult a = nfc_with_alignment(U"a\u0344", 0);
  ASSERT_EQ(a.text, U"\u00E4\u0301");
  EXPECT_EQ(a.align[0], CpRange(0, 1));
  EXPECT_EQ(a.align[1], CpRange(1, 2));
  // Canonical reordering of marks.
  EXPECT_EQ(nfc_with_alignment(U"x\u0301\u0316", 0).text, U"x\u0316\u0301");
}

TEST(Nfc, FastPathAgreesWithFullAlgorithm) {
  const json prompts = read_json(fixture_dir() + "/prompts.json");
  for (const auto& p : prompts) {
    const std::u32string t = utf8_decode(p.at("normalized_prompt").get<std::string>(), "t");
    const NfcResult a = nfc_with_alignment(t, 0);
    const NfcResult b = nfc_with_alignment_full(t, 0);
    EXPECT_EQ(a.text, b.text) << p.at("name");
    EXPECT_EQ(a.align, b.align) << p.at("name");
  }
}

TEST(Regex, OnigurumaEscapes) {
  // Oniguruma reads \U as the letter U, and its \s includes NEL (U+0085).
  EXPECT_EQ(onig_to_pcre2(R"([\U0-\u0041])", "t"), R"([U0-\x{0041}])");
  Regex space(R"(\s+)", "t");
  EXPECT_EQ(space.find_all("a\xC2\x85 b").size(), 1u);
  EXPECT_EQ(space.find_all("a\xC2\x85 b")[0], ByteRange(1, 4));
  Regex qwen(R"((?i:'s|'t)|\p{N}|\s+(?!\S)|\s+)", "t");
  // Case-insensitive 's also matches LATIN SMALL LETTER LONG S, as Oniguruma's Unicode folding.
  EXPECT_EQ(qwen.find_all("'\xC5\xBF").size(), 1u);
  EXPECT_THROW(Regex(R"([\S])", "t"), Error);
  EXPECT_THROW(Regex("(", "t"), Error);
}

TEST(TokenizerErrors, BadInputs) {
  auto tok = Tokenizer::load(fixture_dir() + "/text_encoder");
  EXPECT_TRUE(test::throws_with([&] { tok->encode("abc\xFF"); }, {"tokenizer input", "not valid UTF-8", "byte 3"}));
  EXPECT_TRUE(test::throws_with([&] { tok->encode(""); }, {"empty prompt"}));
  EXPECT_TRUE(test::throws_with([&] { tok->encode("\xED\xA0\x80"); }, {"not valid UTF-8"}));  // encoded surrogate
  EXPECT_TRUE(test::throws_with([&] { tok->encode("\xC0\xAF"); }, {"not valid UTF-8"}));      // overlong
  EncodeOptions opt;
  opt.allow_empty = true;
  EXPECT_EQ(tok->encode("", opt).size(), 0u);
  opt.max_length = 0;
  EXPECT_TRUE(test::throws_with([&] { tok->encode("abc", opt); }, {"max_length 0"}));
}

// The tokenizer refuses only "" (above); the engine's request check refuses a
// blank prompt too, before any model work, for every front end.
TEST(TokenizerErrors, BlankPromptsAreRefusedBeforeTheEncoder) {
  EXPECT_EQ(prompt_problem(""), "is empty");
  for (const char* blank : {" ", "\t", "\n", " \t\r\n ", "\v\f", "\xE3\x80\x80", "\xC2\xA0 \xE2\x80\x83"})
    EXPECT_EQ(prompt_problem(blank), "is only whitespace") << ::testing::PrintToString(std::string(blank));
  // Any other character is a prompt: control and zero-width characters
  // (not str.isspace), and invalid UTF-8 (left to the tokenizer to name).
  for (const char* text : {"a", " a ", "\n.\n", "\x01", "\xE2\x80\x8B", " \xFF "})
    EXPECT_EQ(prompt_problem(text), "") << ::testing::PrintToString(std::string(text));

  GenerateParams p;
  p.latents_path = "/tmp/magi2_blank_prompt.safetensors";
  p.prompt = "a fox";
  EXPECT_NO_THROW(validate(p));
  p.prompt = " \t\n ";
  EXPECT_TRUE(test::throws_with([&] { validate(p); }, {"--prompt: the prompt is only whitespace"}));
  p.label = "sample 3";
  p.prompt = "";
  EXPECT_TRUE(test::throws_with([&] { validate(p); }, {"sample 3: the prompt is empty"}));
  // Precomputed features take the prompt's place: no prompt is needed.
  p.text_features = "/tmp/magi2_blank_prompt_features.safetensors";
  EXPECT_NO_THROW(validate(p));
  // An empty negative prompt is the official default, not an error.
  p.text_features.clear();
  p.prompt = "a fox";
  p.negative_prompt = "";
  EXPECT_NO_THROW(validate(p));
}

TEST(TokenizerErrors, MalformedTokenizerJson) {
  const std::string good = read_text(fixture_dir() + "/text_encoder/tokenizer.json");
  auto expect_error = [](const std::string& text, const std::string& needle) {
    EXPECT_TRUE(test::throws_with([&] { Tokenizer::from_json_text(text, "", true, "bad/tokenizer.json"); },
                                  {"bad/tokenizer.json", needle}));
  };
  expect_error("{\"model\": ", "malformed JSON");
  expect_error("[1, 2]", "top level");
  expect_error("{}", "missing 'model'");

  json j = json::parse(good);
  json k = j;
  k["model"]["type"] = "WordPiece";
  expect_error(k.dump(), "BPE");
  k = j;
  k["model"]["merges"].push_back(json::array({"\xE2\x82\xAC", "x"}));
  expect_error(k.dump(), "not in the vocabulary");
  k = j;
  k["model"]["merges"][0] = "a";
  expect_error(k.dump(), "merge 0");
  k = j;
  k["normalizer"] = {{"type", "Lowercase"}};
  expect_error(k.dump(), "normalizer type 'Lowercase'");
  k = j;
  k["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Regex", "(unclosed"}};
  expect_error(k.dump(), "cannot compile regex");
  k = j;
  k["pre_tokenizer"] = {{"type", "Whitespace"}};
  expect_error(k.dump(), "pre_tokenizer type 'Whitespace'");
  k = j;
  k["added_tokens"][0].erase("content");
  expect_error(k.dump(), "content");

  const std::string missing = test::temp_dir("tok_missing");
  EXPECT_TRUE(test::throws_with([&] { Tokenizer::load(missing); }, {"cannot open", missing, "tokenizer.json", "does not exist"}));
}

TEST(TokenizerJson, TemplatePostProcessorAndTruncationBudget) {
  json j = json::parse(read_text(fixture_dir() + "/text_encoder/tokenizer.json"));
  j["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", json::array({{{"SpecialToken", {{"id", "<|im_start|>"}, {"type_id", 0}}}},
                              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
      {"pair", json::array()},
      {"special_tokens", {{"<|im_start|>", {{"id", "<|im_start|>"}, {"ids", {1201}}, {"tokens", {"<|im_start|>"}}}}}}};
  auto tok = Tokenizer::from_json_text(j.dump(), "", true, "template");
  EXPECT_EQ(tok->num_special_tokens_to_add(), 1);
  EncodeOptions opt;
  opt.max_length = 4;
  const Encoding e = tok->encode("A red fox trots through fresh snow", opt);
  ASSERT_EQ(e.size(), 4u);
  EXPECT_EQ(e.ids[0], 1201);
  EXPECT_EQ(e.offsets[0], CpRange(0, 0));
  EXPECT_TRUE(e.truncated());
}

}  // namespace
}  // namespace magi2::qwen35
