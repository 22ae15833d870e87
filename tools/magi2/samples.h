// The official --samples batch file (inference/pipeline/entry.py
// `_load_samples`, example assets/demo_samples.json): a JSON array of objects
// {"prompt": TEXT} or {"prompt_file": PATH}, each with an optional "image"
// (I2VA reference; absent or null = text-to-video). Sample i runs with seed
// base + i; the official run writes OUTPUT/sample_{i:03d}.*.
#pragma once

#include <string>
#include <vector>

namespace magi2::cli {

/// One sample of the batch.
struct Sample {
  std::string prompt;  ///< the prompt text (a prompt_file's contents, whitespace-stripped)
  std::string image;   ///< reference image path, empty for text-to-video
};

/// Reads and validates a samples file. A relative prompt_file is looked up
/// from the current folder (as the official code) and, failing that, next to
/// the samples file. Errors (one line naming the file and the sample index):
/// unreadable file, malformed JSON, not a non-empty array, an entry that is
/// not an object, with neither or both of prompt/prompt_file, a non-string
/// value, an unknown key, an unreadable prompt file.
std::vector<Sample> load_samples(const std::string& path);

/// Output name of sample i: "_sample_NNN" (3 digits, as the official
/// sample_{i:03d}) inserted before the extension of `path`
/// ("out/lat.safetensors" -> "out/lat_sample_002.safetensors"; no extension:
/// appended).
std::string sample_output_path(const std::string& path, size_t index);

}  // namespace magi2::cli
