// `magi2 enhance-prompt` against a loopback OpenAI-compatible server started
// here (tests/util/fake_openai.h): the request (path, Bearer header, model,
// response_format, the I2V image data URL), the rendered result, every fault
// (unreachable, timeout, 4xx with the endpoint's message, 5xx and 429 retries
// with Retry-After, oversized, non-JSON, missing keys, schema violations),
// and the API key never appearing in any output. Plus --caption-json offline.
#include <gtest/gtest.h>

#include <openssl/evp.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "util/cli.h"
#include "util/fake_openai.h"
#include "util/testing.h"

namespace magi2::test {
namespace {

namespace fs = std::filesystem;

const std::string kKey = "sk-test-Zq81SECRETkey";

std::string pe_dir() { return golden_dir() + "/prompt_enhancement"; }

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The first fixture case of `task`: {json text, markdown}.
nlohmann::json cases() { return nlohmann::json::parse(slurp(pe_dir() + "/cases.json")).at("cases"); }

std::pair<std::string, std::string> fixture(const std::string& task) {
  for (const auto& c : cases())
    if (c.at("task") == task)
      return {slurp(pe_dir() + "/" + c.at("json").get<std::string>()),
              slurp(pe_dir() + "/" + c.at("markdown").get<std::string>())};
  ADD_FAILURE() << "no " << task << " case";
  return {};
}

// enhance-prompt with the key in the environment and no inherited endpoint settings.
CliRun enhance(const std::string& args, const std::string& env = "OPENAI_API_KEY=" + kKey) {
  CliRun r;
  r.rc = run_command("env -u OPENAI_API_KEY -u OPENAI_BASE_URL " + env + " " + magi2_binary() + " enhance-prompt " +
                         args,
                     &r.out);
  return r;
}

void expect_no_key(const CliRun& r) { EXPECT_EQ(r.out.find(kKey), std::string::npos) << r.out; }

class EnhancePrompt : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = temp_dir("enhance_prompt"); }
  std::string out_md() const { return dir_ + "/out.md"; }
  // A failing run: one error line naming the endpoint and `cause`, no output file, no key.
  void expect_fault(const CliRun& r, const std::string& cause) {
    expect_one_line_error(r, cause);
    EXPECT_NE(r.out.find(server_.base_url() + "/chat/completions"), std::string::npos) << r.out;
    EXPECT_FALSE(fs::exists(out_md()));
    expect_no_key(r);
  }
  std::string args(const std::string& extra = "") const {
    return "--prompt 'A red fox trots through fresh snow.' --pe-base-url " + server_.base_url() + " -o " + out_md() +
           " " + extra;
  }
  std::string dir_;
  FakeOpenAI server_;
};

TEST_F(EnhancePrompt, T2VRequestAndRenderedResult) {
  const auto [caption, md] = fixture("t2v");
  server_.script({{200, chat_answer(caption)}});
  const std::string metrics = dir_ + "/metrics.json";
  const CliRun r = enhance(args("--pe-model test-model --pe-max-tokens 777 --metrics " + metrics));
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(slurp(out_md()), md);
  EXPECT_NE(r.out.find("prompt enhancement: t2v via " + server_.base_url() + "/chat/completions"), std::string::npos)
      << r.out;
  expect_no_key(r);
  const auto seen = server_.seen();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].method, "POST");
  EXPECT_EQ(seen[0].path, "/v1/chat/completions");
  EXPECT_EQ(seen[0].authorization, "Bearer " + kKey);
  const nlohmann::json body = nlohmann::json::parse(seen[0].body);
  EXPECT_EQ(body.at("model"), "test-model");
  EXPECT_EQ(body.at("max_tokens"), 777);
  const auto& content = body.at("messages").at(0).at("content");
  ASSERT_EQ(content.size(), 1u);
  const std::string text = content[0].at("text");
  EXPECT_NE(text.find("A red fox trots through fresh snow."), std::string::npos);
  EXPECT_EQ(text.find("{user_input_text}"), std::string::npos);
  EXPECT_EQ(text.find("{variation_seed}"), std::string::npos);
  const auto& js = body.at("response_format").at("json_schema");
  EXPECT_EQ(body["response_format"]["type"], "json_schema");
  EXPECT_EQ(js.at("name"), "T2VEnhanceResult");
  EXPECT_EQ(js.at("strict"), true);
  EXPECT_EQ(js.at("schema"), nlohmann::json::parse(slurp(pe_dir() + "/response_schemas.json")).at("t2v"));
  // Metrics: time and lengths, never the key.
  const std::string mtext = slurp(metrics);
  EXPECT_EQ(mtext.find(kKey), std::string::npos);
  const nlohmann::json m = nlohmann::json::parse(mtext).at("prompt_enhancement");
  EXPECT_EQ(m.at("attempts"), 1);
  EXPECT_EQ(m.at("prompt_chars"), 35);
  EXPECT_GT(m.at("enhanced_chars").get<int>(), 35);
  EXPECT_GE(m.at("ms").get<double>(), 0.0);
}

TEST_F(EnhancePrompt, I2VSendsTheImageAsDataUrl) {
  const auto [caption, md] = fixture("i2v");
  server_.script({{200, chat_answer(caption)}});
  const std::string image = golden_dir() + "/wan22_vae_encoder_tiny/ref_image.png";
  const std::string key_file = dir_ + "/key.txt";
  std::ofstream(key_file) << "  " << kKey << "\n";
  const CliRun r = enhance(args("--image " + image + " --pe-api-key-file " + key_file), "");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(slurp(out_md()), md);
  expect_no_key(r);
  const auto seen = server_.seen();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].authorization, "Bearer " + kKey);
  const nlohmann::json body = nlohmann::json::parse(seen[0].body);
  const auto& content = body.at("messages").at(0).at("content");
  ASSERT_EQ(content.size(), 2u);
  EXPECT_EQ(content[1].at("type"), "image_url");
  const std::string bytes = slurp(image);
  std::string b64(4 * ((bytes.size() + 2) / 3) + 1, '\0');
  b64.resize(EVP_EncodeBlock(reinterpret_cast<unsigned char*>(b64.data()),
                             reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<int>(bytes.size())));
  EXPECT_EQ(content[1].at("image_url").at("url"), "data:image/png;base64," + b64);
  EXPECT_EQ(body.at("response_format").at("json_schema").at("name"), "I2VEnhanceResult");
}

TEST_F(EnhancePrompt, NoKeyNoAuthorizationAndOwnTemplate) {
  const auto [caption, md] = fixture("t2v");
  server_.script({{200, chat_answer(caption)}});
  const std::string tmpl = dir_ + "/tmpl.md";
  std::ofstream(tmpl) << "Caption this: <<{user_input_text}>>{variation_seed}";
  const CliRun r = enhance(args("--pe-template " + tmpl), "");
  ASSERT_EQ(r.rc, 0) << r.out;
  const auto seen = server_.seen();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].authorization, "");
  EXPECT_EQ(nlohmann::json::parse(seen[0].body)["messages"][0]["content"][0]["text"],
            "Caption this: <<A red fox trots through fresh snow.>>");
}

TEST_F(EnhancePrompt, Unreachable) {
  const std::string url = server_.base_url();
  server_.stop();
  const CliRun r = enhance("--prompt fox --pe-base-url " + url + " -o " + out_md());
  expect_one_line_error(r, "cannot connect");
  EXPECT_NE(r.out.find(url + "/chat/completions"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(out_md()));
}

TEST_F(EnhancePrompt, Timeout) {
  server_.script({{200, chat_answer(fixture("t2v").first), {}, 3000}});
  expect_fault(enhance(args("--pe-timeout 0.3")), "within 0.3 s");
}

TEST_F(EnhancePrompt, ClientErrorQuotesTheEndpointAndHidesTheKey) {
  // The endpoint echoes the key in its message: it must come back masked.
  server_.script({{401, R"({"error": {"message": "Incorrect API key provided: )" + kKey + R"(", "type": "auth"}})"}});
  const CliRun r = enhance(args());
  expect_fault(r, "HTTP 401: Incorrect API key provided: ***");
  EXPECT_EQ(server_.seen().size(), 1u);  // 4xx other than 429: no retry
}

TEST_F(EnhancePrompt, ServerErrorRetriedThenGivesUp) {
  server_.script({{503, R"({"error": {"message": "overloaded"}})"}});
  expect_fault(enhance(args("--pe-retries 2")), "HTTP 503: overloaded (after 3 attempts");
  EXPECT_EQ(server_.seen().size(), 3u);
}

TEST_F(EnhancePrompt, RetryAfterHonouredThenSuccess) {
  const auto [caption, md] = fixture("t2v");
  server_.script({{429, R"({"error": {"message": "slow down"}})", {{"Retry-After", "0"}}},
                  {500, "upstream hiccup"},
                  {200, chat_answer(caption)}});
  const CliRun r = enhance(args());
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("3 attempts"), std::string::npos) << r.out;
  EXPECT_EQ(slurp(out_md()), md);
}

TEST_F(EnhancePrompt, RetryAfterBeyondTheBudgetGivesUpAtOnce) {
  server_.script({{429, R"({"error": "rate limited"})", {{"Retry-After", "120"}}}});
  expect_fault(enhance(args()), "asked to wait 120 s");
  EXPECT_EQ(server_.seen().size(), 1u);
}

TEST_F(EnhancePrompt, OversizedAnswerRefused) {
  server_.script({{200, chat_answer(fixture("t2v").first)}});
  expect_fault(enhance(args("--pe-max-response-bytes 1000")), "1000-byte limit");
}

TEST_F(EnhancePrompt, BadAnswers) {
  const auto [caption, md] = fixture("t2v");
  nlohmann::json missing = nlohmann::json::parse(caption);
  missing.erase("dynamic_layer");
  nlohmann::json violating = nlohmann::json::parse(caption);
  violating["global_layer"]["video_metadata"]["duration"] = "ten";
  const std::pair<std::string, std::string> cases[] = {
      {"<html>gateway</html>", "not a JSON object"},
      {R"({"object": "list"})", "no choices[0]"},
      {chat_answer("Sure! Here is your caption: {"), "caption is not valid JSON"},
      {chat_answer(caption.substr(0, caption.size() / 2), "length"), "raise --pe-max-tokens"},
      {chat_answer(missing.dump()), "lacks the required key(s) \"dynamic_layer\""},
      {chat_answer(violating.dump()), "global_layer.video_metadata.duration: expected number, got string"},
  };
  for (const auto& [answer, cause] : cases) {
    server_.script({{200, answer}});
    expect_fault(enhance(args()), cause);
  }
}

TEST_F(EnhancePrompt, BadFlags) {
  expect_one_line_error(enhance("--prompt fox -o " + out_md(), ""), "--pe-base-url");
  expect_one_line_error(enhance("--prompt fox --pe-base-url ftp://x/v1"), "only http:// and https://");
  expect_one_line_error(enhance("--prompt fox --pe-base-url " + server_.base_url() + " --pe-api-key-file " + dir_ +
                                "/nokey.txt"),
                        "--pe-api-key-file");
  expect_one_line_error(enhance("--prompt fox --task i2v --pe-base-url " + server_.base_url()), "--task i2v needs --image");
  expect_one_line_error(enhance("--prompt fox --image " + dir_ + "/none.png --pe-base-url " + server_.base_url()),
                        "--image");
  // A blank prompt has nothing to rewrite: refused before any request.
  expect_one_line_error(enhance("--prompt ' \t ' --pe-base-url " + server_.base_url()),
                        "--prompt: the prompt is only whitespace");
  EXPECT_TRUE(server_.seen().empty());
}

TEST(EnhancePromptHttps, VerifiesTheCertificate) {
  // A self-signed certificate for 127.0.0.1: refused against the system
  // trust store, accepted with --pe-ca-file.
  const std::string dir = temp_dir("enhance_https");
  std::string log;
  ASSERT_EQ(run_command("openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=127.0.0.1 "
                        "-addext subjectAltName=IP:127.0.0.1 -keyout " +
                            dir + "/key.pem -out " + dir + "/cert.pem",
                        &log),
            0)
      << log;
  FakeOpenAI server(dir + "/cert.pem", dir + "/key.pem");
  const auto [caption, md] = fixture("t2v");
  server.script({{200, chat_answer(caption)}});
  const std::string out = dir + "/out.md";
  const std::string base = "--prompt fox --pe-base-url " + server.base_url() + " -o " + out;
  expect_one_line_error(enhance(base), "certificate");
  EXPECT_FALSE(fs::exists(out));
  const CliRun r = enhance(base + " --pe-ca-file " + dir + "/cert.pem");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(slurp(out), md);
  ASSERT_EQ(server.seen().size(), 1u);
  EXPECT_EQ(server.seen()[0].authorization, "Bearer " + kKey);
}

TEST(EnhancePromptOffline, CaptionJsonRendersEveryFixture) {
  const std::string dir = temp_dir("enhance_offline");
  for (const auto& c : cases()) {
    const std::string out = dir + "/" + c.at("name").get<std::string>() + ".md";
    const CliRun r = magi2("enhance-prompt --caption-json " + pe_dir() + "/" + c.at("json").get<std::string>() +
                           " --task " + c.at("task").get<std::string>() + " -o " + out);
    ASSERT_EQ(r.rc, 0) << r.out;
    EXPECT_EQ(slurp(out), slurp(pe_dir() + "/" + c.at("markdown").get<std::string>())) << c.at("name");
  }
  const std::string t2v = fixture("t2v").first;
  const std::string path = dir + "/t2v.json";
  std::ofstream(path) << t2v;
  expect_one_line_error(magi2("enhance-prompt --caption-json " + path + " --task i2v -o " + dir + "/x.md"),
                        "lacks the required key(s)");
  expect_one_line_error(magi2("enhance-prompt --caption-json " + path), "--task");
  std::ofstream(dir + "/bad.json") << "{\"global_layer\": ";
  expect_one_line_error(magi2("enhance-prompt --caption-json " + dir + "/bad.json --task t2v"), "not valid JSON");
  EXPECT_FALSE(fs::exists(dir + "/x.md"));
}

}  // namespace
}  // namespace magi2::test
