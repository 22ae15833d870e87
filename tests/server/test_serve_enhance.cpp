// `magi2 serve` with prompt enhancement: started with --pe-base-url pointing at
// the loopback OpenAI-compatible server (tests/util/fake_openai.h), a request
// with `enhance_prompt: true` completes and the endpoint receives the request's
// prompt; started without an endpoint, the same request is a 400 naming the field.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fcntl.h>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "util/fake_openai.h"
#include "util/media_probe.h"
#include "util/testing.h"

extern char** environ;

namespace magi2::test {
namespace {

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// The first T2V caption of the rendering fixtures (what the fake endpoint answers).
std::string t2v_caption() {
  const std::string dir = golden_dir() + "/prompt_enhancement/";
  const nlohmann::json cases = nlohmann::json::parse(slurp(dir + "cases.json")).at("cases");
  for (const auto& c : cases)
    if (c.at("task") == "t2v") return slurp(dir + c.at("json").get<std::string>());
  ADD_FAILURE() << "no t2v case";
  return {};
}

// One `magi2 serve` on builtin:tiny and a free loopback port, stopped (SIGTERM, waited for) at the end.
class Serve {
 public:
  explicit Serve(const std::vector<std::string>& extra) {
    static const std::string cache = temp_dir("serve_enhance_cache");
    const std::string dir = temp_dir("serve_enhance");
    log_ = dir + "/log";
    std::vector<std::string> args = {magi2_binary(), "serve",         "--model",    "builtin:tiny", "--port", "0",
                                     "--threads",    "1",             "--output-dir", dir + "/out"};
    args.insert(args.end(), extra.begin(), extra.end());
    // The environment without inherited endpoint settings, with a cache private to this test.
    std::vector<std::string> env = {"MAGI2_CACHE_DIR=" + cache};
    for (char** e = environ; *e; ++e) {
      const std::string v = *e;
      if (v.rfind("OPENAI_", 0) != 0 && v.rfind("MAGI2_", 0) != 0) env.push_back(v);
    }
    std::vector<char*> argv, envp;
    for (auto& s : args) argv.push_back(s.data());
    for (auto& s : env) envp.push_back(s.data());
    argv.push_back(nullptr);
    envp.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    const int rc = posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) pid_ = -1;
    // The first line names the port: "magi2 serve: MODEL on http://127.0.0.1:PORT (...)".
    const std::string mark = "http://127.0.0.1:";
    for (int i = 0; i < 3000 && pid_ > 0 && port_ < 0; ++i) {
      const std::string text = slurp(log_);
      if (const auto at = text.find(mark); at != std::string::npos && text.find(' ', at) != std::string::npos)
        port_ = std::stoi(text.substr(at + mark.size()));
      else if (waitpid(pid_, nullptr, WNOHANG) == pid_)
        pid_ = -1;
      else
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  ~Serve() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    waitpid(pid_, nullptr, 0);
  }
  int port() const { return port_; }
  std::string log() const { return slurp(log_); }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(600, 0);
    return c;
  }

 private:
  std::string log_;
  pid_t pid_ = -1;
  int port_ = -1;
};

// A small clip (one latent frame, 32x32, 2 steps) asking for prompt enhancement.
const nlohmann::json kRequest = {{"prompt", "A red fox in the snow."},
                                 {"seconds", "0.2"},
                                 {"size", "32x32"},
                                 {"num_inference_steps", 2},
                                 {"enhance_prompt", true}};

TEST(ServerEnhance, JobWithEnhancePromptCompletes) {
  SKIP_WITHOUT_MP4();  // the job's video is an MP4
  FakeOpenAI pe;
  pe.script({{200, chat_answer(t2v_caption())}});
  Serve serve({"--pe-base-url", pe.base_url()});
  ASSERT_GT(serve.port(), 0) << serve.log();
  auto c = serve.client();
  auto res = c.Post("/v1/videos/sync", kRequest.dump(), "application/json");
  ASSERT_TRUE(res) << serve.log();
  ASSERT_EQ(res->status, 200) << res->body;
  const std::string id = res->get_header_value("X-Video-Id");
  ASSERT_FALSE(id.empty());
  auto job = c.Get("/v1/videos/" + id);
  ASSERT_TRUE(job);
  const nlohmann::json v = nlohmann::json::parse(job->body);
  EXPECT_EQ(v.at("status"), "completed") << job->body << serve.log();
  EXPECT_EQ(v.at("prompt"), kRequest.at("prompt"));
  EXPECT_EQ(res->body.substr(4, 4), "ftyp");  // an MP4 came back
  // The endpoint got one chat request carrying the request's own prompt.
  const auto seen = pe.seen();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].path, "/v1/chat/completions");
  const nlohmann::json body = nlohmann::json::parse(seen[0].body);
  EXPECT_NE(body.at("messages").dump().find(kRequest.at("prompt").get<std::string>()), std::string::npos) << seen[0].body;
}

TEST(ServerEnhance, EnhancePromptWithoutEndpointIs400) {
  Serve serve({});
  ASSERT_GT(serve.port(), 0) << serve.log();
  auto c = serve.client();
  auto res = c.Post("/v1/videos", kRequest.dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400) << res->body;
  const nlohmann::json e = nlohmann::json::parse(res->body).at("error");
  EXPECT_EQ(e.at("param"), "enhance_prompt");
  EXPECT_NE(e.at("message").get<std::string>().find("--pe-base-url"), std::string::npos) << res->body;
  // enhance_prompt: false is accepted as usual.
  nlohmann::json plain = kRequest;
  plain["enhance_prompt"] = false;
  auto ok = c.Post("/v1/videos", plain.dump(), "application/json");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
}

}  // namespace
}  // namespace magi2::test
