#include "samples.h"

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/json_depth.h"
#include "io/mmap_file.h"
#include "engine/text_conditioning.h"

namespace magi2::cli {

namespace fs = std::filesystem;

std::vector<Sample> load_samples(const std::string& path) {
  std::error_code ec;
  const std::string why = file_problem(path);
  MAGI2_CHECK(why.empty(), "--samples file '", path, "' ", why);
  const std::string text = read_text_file(path);
  check_json_depth(text, str_cat("--samples file '", path, "'"));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw Error(str_cat("--samples file '", path, "' is not valid JSON: ", plain_json_message(e.what())));
  }
  MAGI2_CHECK(j.is_array() && !j.empty(), "--samples file '", path, "' must hold a non-empty JSON array");
  constexpr size_t kMaxSamples = 10000;  // sample numbers are written with 3+ digits; far beyond any batch
  MAGI2_CHECK(j.size() <= kMaxSamples, "--samples file '", path, "' holds ", j.size(), " samples, more than ",
              kMaxSamples);
  std::vector<Sample> out;
  for (size_t i = 0; i < j.size(); ++i) {
    const auto& e = j[i];
    auto bad = [&](const std::string& why) {
      return Error(str_cat("--samples file '", path, "': sample ", i, ": ", why));
    };
    if (!e.is_object()) throw bad("expected an object {\"prompt\"|\"prompt_file\", \"image\"}");
    for (const auto& [k, v] : e.items())
      if (k != "prompt" && k != "prompt_file" && k != "image") throw bad(str_cat("unknown key '", k, "'"));
    const bool has_p = e.contains("prompt"), has_f = e.contains("prompt_file");
    if (has_p == has_f) throw bad("needs exactly one of \"prompt\" and \"prompt_file\"");
    Sample s;
    if (has_p) {
      if (!e["prompt"].is_string()) throw bad("\"prompt\" must be a string");
      s.prompt = e["prompt"].get<std::string>();
    } else {
      if (!e["prompt_file"].is_string()) throw bad("\"prompt_file\" must be a string");
      fs::path f = e["prompt_file"].get<std::string>();
      if (f.is_relative() && !fs::exists(f, ec)) {
        const fs::path beside = fs::path(path).parent_path() / f;
        if (fs::exists(beside, ec)) f = beside;
      }
      try {
        s.prompt = read_prompt_file(f.string());
      } catch (const Error& err) {
        throw bad(err.what());
      }
    }
    if (e.contains("image") && !e["image"].is_null()) {
      if (!e["image"].is_string()) throw bad("\"image\" must be a string or null");
      s.image = e["image"].get<std::string>();
    }
    out.push_back(std::move(s));
  }
  return out;
}

std::string sample_output_path(const std::string& path, size_t index) {
  char tag[32];
  std::snprintf(tag, sizeof tag, "_sample_%03zu", index);
  const fs::path p(path);
  if (!p.has_extension()) return path + tag;
  return (p.parent_path() / (p.stem().string() + tag + p.extension().string())).string();
}

}  // namespace magi2::cli
