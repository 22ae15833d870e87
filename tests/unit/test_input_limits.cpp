// Input limits shared by every reader: the JSON nesting bound (configs,
// safetensors headers, prompts), whole-file reads that refuse devices and
// folders by name, and the non-finite counter used before outputs are written.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <limits>
#include <string>

#include "core/dtype.h"
#include "core/finite.h"
#include "io/json_depth.h"
#include "io/mmap_file.h"
#include "io/safetensors.h"
#include "io/temp_files.h"
#include "models/magi2_dit/config.h"
#include "models/qwen35/prompt.h"
#include "util/testing.h"

namespace magi2 {
namespace {

using test::throws_with;

std::string nested(int depth, char open = '[', char close = ']') {
  return std::string(static_cast<size_t>(depth), open) + std::string(static_cast<size_t>(depth), close);
}

TEST(JsonDepth, CountsOutsideStringsOnly) {
  EXPECT_EQ(json_nesting_depth("{}"), 1);
  EXPECT_EQ(json_nesting_depth(R"({"a": [1, {"b": "[[[[\"{{"}]})"), 3);
  EXPECT_EQ(json_nesting_depth("\"[[[\""), 0);
  EXPECT_EQ(json_nesting_depth(nested(kMaxJsonDepth)), kMaxJsonDepth);
  EXPECT_EQ(json_nesting_depth(nested(100000)), kMaxJsonDepth + 1);  // stops counting at the limit
  EXPECT_NO_THROW(check_json_depth(nested(kMaxJsonDepth), "x"));
  EXPECT_TRUE(throws_with([] { check_json_depth(nested(kMaxJsonDepth + 1), "thing.json"); },
                          {"thing.json", "nested deeper than"}));
}

TEST(JsonDepth, EveryReaderRefusesDeepNesting) {
  const std::string deep = "{\"arch_config\": " + nested(200000) + "}";
  EXPECT_TRUE(throws_with([&] { Magi2Config::from_json_text(deep, "deep.json"); }, {"deep.json", "nested deeper"}));
  // Prompts: the official policy keeps an unparsable text as is; strict names the cause.
  const std::string prompt = "{\"global_layer\": " + nested(200000, '{', '}') + "}";
  EXPECT_EQ(qwen35::normalize_prompt(nested(200000)), nested(200000));
  EXPECT_TRUE(throws_with([&] { qwen35::normalize_prompt(prompt, qwen35::JsonPromptPolicy::kStrict); },
                          {"nested deeper"}));
  const std::string dir = test::temp_dir("json_depth");
  const std::string header = "{\"t\": " + nested(50000) + "}";
  std::string file;
  for (int i = 0; i < 8; ++i) file.push_back(static_cast<char>((header.size() >> (8 * i)) & 0xff));
  write_file_atomic(dir + "/deep.safetensors", file + header);
  EXPECT_TRUE(throws_with([&] { SafetensorsFile::open(dir + "/deep.safetensors"); },
                          {"deep.safetensors", "nested deeper"}));
}

TEST(ReadTextFile, NamesDevicesFoldersAndMissingFiles) {
  EXPECT_TRUE(throws_with([] { read_text_file("/dev/zero"); }, {"/dev/zero", "character device"}));
  const std::string dir = test::temp_dir("read_text");
  EXPECT_TRUE(throws_with([&] { read_text_file(dir); }, {dir, "is a folder"}));
  EXPECT_TRUE(throws_with([&] { read_text_file(dir + "/absent.json"); }, {"absent.json", "does not exist"}));
  EXPECT_TRUE(throws_with([] { MappedFile::open("/dev/zero"); }, {"/dev/zero", "character device"}));
  write_file_atomic(dir + "/ten", std::string(10, 'x'));
  EXPECT_EQ(read_text_file(dir + "/ten"), std::string(10, 'x'));
  EXPECT_TRUE(throws_with([&] { read_text_file(dir + "/ten", 9); }, {"ten", "longer than 9 bytes"}));
}

TEST(NonFinite, CountsEveryFloatDtypeOnItsBits) {
  const float inf = std::numeric_limits<float>::infinity();
  const Tensor f = Tensor::from_f32({2, 3}, {0.f, std::nanf(""), 1.f, -inf, 3.f, inf});
  NonFiniteCount c = count_nonfinite(f);
  EXPECT_EQ(c.count, 3);
  EXPECT_EQ(c.nan, 1);
  EXPECT_EQ(c.first, 1);
  for (DType d : {DType::BF16, DType::F16}) {
    c = count_nonfinite(f.to(d));
    EXPECT_EQ(c.count, 3) << dtype_name(d);
    EXPECT_EQ(c.nan, 1) << dtype_name(d);
  }
  // A strided view: column 0 of the [2, 3] tensor holds 0 and -inf.
  const Tensor col = f.slice_cols(0, 1);
  c = count_nonfinite(col);
  EXPECT_EQ(c.count, 1);
  EXPECT_EQ(c.first, 1);
  EXPECT_EQ(count_nonfinite(Tensor::zeros({4}, DType::I64)).count, 0);
  EXPECT_NO_THROW(check_finite(Tensor::from_f32({2}, {1.f, 2.f}), "x"));
  EXPECT_TRUE(throws_with([&] { check_finite(f, "denoising step 3: video latent"); },
                          {"denoising step 3: video latent", "3 of 6 values are not finite", "1 NaN"}));
}

TEST(TempFiles, RemovedOnSigtermAndSigint) {
  const std::string dir = test::temp_dir("temp_files");
  for (int sig : {SIGTERM, SIGINT}) {
    const std::string tmp = dir + "/partial.tmp." + std::to_string(sig);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      const TempFileGuard guard(tmp);
      write_file_atomic(tmp + ".x", "");  // (its own temp file is gone once it returns)
      FILE* f = std::fopen(tmp.c_str(), "w");
      std::fputs("half", f);
      std::fclose(f);
      ::raise(sig);
      ::_exit(3);  // not reached: the default action terminates
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == sig) << "status " << status;
    EXPECT_NE(::access(tmp.c_str(), F_OK), 0) << tmp << " survived signal " << sig;
  }
  {
    const TempFileGuard g(dir + "/a");
    EXPECT_GE(registered_temp_files(), 1);
  }
}

}  // namespace
}  // namespace magi2
