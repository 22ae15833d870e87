// Bad input to the magi2 binary: one clear line on stderr naming the thing at
// fault and exit status 1, and no output file left behind.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "media/mp4.h"
#include "media/png.h"
#include "util/cli.h"
#include "util/testing.h"

namespace magi2::test {
namespace {

std::string golden(const std::string& p) { return golden_dir() + "/dit_tiny/" + p; }

// Common flags of a tiny generate run on the golden model.
std::string gen(const std::string& extra) {
  return "generate --model " + golden("") + " --transformer " + golden("ckpt") + " --text-features " +
         golden("dit_io.safetensors") + " --seconds 0.4 --width 96 --height 64 " + extra;
}

TEST(CliErrors, UnknownResolution) {
  expect_one_line_error(magi2(gen("--resolution 4k --save-latents /tmp/x.safetensors")), "--resolution");
}

// 1080p needs MODEL/refiner/: the golden DiT folder has none, and that is said before any step.
TEST(CliErrors, RefinerMissing) {
  expect_one_line_error(magi2(gen("--resolution 1080p --save-latents /tmp/x.safetensors")), "refiner/");
}

TEST(CliErrors, StepsBelowOne) {
  expect_one_line_error(magi2(gen("--num-inference-steps 0 --save-latents /tmp/x.safetensors")),
                        "--num-inference-steps");
  // The engine's internal "config default" value is no valid flag value either.
  expect_one_line_error(magi2(gen("--num-inference-steps -1 --save-latents /tmp/x.safetensors")),
                        "--num-inference-steps");
}

TEST(CliErrors, NumbersOutsideTheirDocumentedRange) {
  const std::string out = " --save-latents /tmp/magi2_range_x.safetensors";
  expect_one_line_error(magi2(gen("--num-inference-steps 100000" + out)), "--num-inference-steps");
  expect_one_line_error(magi2(gen("--threads 100000" + out)), "--threads");
  expect_one_line_error(magi2(gen("--threads -3" + out)), "--threads");
  expect_one_line_error(magi2("generate --seconds 100000 --prompt x" + out), "--seconds must be in (0, 60]");
  expect_one_line_error(magi2("generate --seconds nan --prompt x" + out), "--seconds");
  expect_one_line_error(magi2("generate --width 2048 --height 2048 --seconds 10 --prompt x" + out),
                        "exceeds the largest clip");
  expect_one_line_error(magi2("generate --width 100000 --height 64 --prompt x" + out), "--width must be");
  expect_one_line_error(magi2("generate --prompt x -o /tmp/magi2_range.mp4 --output-width 100000 --output-height 64"),
                        "--output-width must be in [1, 8192]");
  expect_one_line_error(magi2("encode-text --prompt x --threads 99999 -o /tmp/magi2_range_t.safetensors"),
                        "--threads");
  EXPECT_FALSE(std::filesystem::exists("/tmp/magi2_range_x.safetensors"));
}

TEST(CliErrors, InputsThatAreNotFilesAreNamedSo) {
  const std::string out = " --save-latents /tmp/magi2_notfile_x.safetensors";
  expect_one_line_error(magi2(gen("--image /dev/zero" + out)), "/dev/zero: is a character device");
  expect_one_line_error(magi2(gen("--image /nonexistent.png" + out)), "/nonexistent.png: does not exist");
  expect_one_line_error(magi2("generate --prompt-file /dev/zero" + out), "is a character device");
  expect_one_line_error(magi2("generate --samples /tmp" + out), "is a folder");
}

TEST(CliErrors, DevicesAreNotFolders) {
  const std::string out = " --save-latents /tmp/magi2_devfolder_x.safetensors";
  expect_one_line_error(magi2("generate --model /dev/zero --prompt x" + out), "/dev/zero' is a character device");
  expect_one_line_error(magi2(gen("--save-latents /dev/null/x.safetensors")), "is a character device");
  expect_one_line_error(magi2(gen("-o /tmp/magi2_fmt.mp4 --audio-format mp3")), "--audio-format");
}

TEST(CliErrors, ServeAndMakeTinyCountsOutsideTheirRange) {
  // Checked before the model is loaded (10^8 HTTP threads used to abort in std::thread).
  for (const char* flags : {"--http-threads 100000000", "--http-threads 1", "--max-side 999999", "--max-side 8",
                            "--max-steps 0", "--max-steps 100000", "--max-seconds 1e9", "--max-seconds nan",
                            "--keep 0", "--max-queue 0", "--max-body-mb 99999999", "--threads 99999"}) {
    const std::string flag = std::string(flags).substr(0, std::string(flags).find(' '));
    expect_one_line_error(magi2(std::string("serve --port 0 ") + flags), flag);
  }
  expect_one_line_error(magi2("serve --max-queue -1"), "--max-queue");
  const std::string dir = temp_dir("cli_tiny_seed") + "/m";
  expect_one_line_error(magi2("make-tiny --seed -1 " + dir), "--seed");
  EXPECT_FALSE(std::filesystem::exists(dir));
}

TEST(CliErrors, ReferenceImageTooElongatedForTheSizeIsRefusedUpFront) {
  // 640x16 fits a 96x2 canvas at 96x64: refused from the header, naming the
  // flag and the file, before the model or the image decoder runs.
  const std::string dir = temp_dir("cli_ref_geometry");
  Tensor strip = Tensor::empty({16, 640, 3}, DType::U8);
  std::memset(strip.data(), 90, strip.nbytes());
  const std::string png = dir + "/strip.png";
  {
    std::ofstream f(png, std::ios::binary);
    f << encode_png_rgb(strip);
  }
  CliRun r = magi2(gen("--image " + png + " --save-latents " + dir + "/lat.safetensors"));
  expect_one_line_error(r, "--image " + png + ": image 640x16 fits a 96x2 canvas");
  EXPECT_FALSE(std::filesystem::exists(dir + "/lat.safetensors"));
}

TEST(CliErrors, OutputsMustDifferFromInputsAndEachOther) {
  const std::string dir = temp_dir("cli_paths");
  // An output onto an input: the input would be destroyed mid-run.
  expect_one_line_error(magi2(gen("--save-latents " + golden("dit_io.safetensors"))), "--text-features");
  expect_one_line_error(magi2(gen("--noise " + dir + "/n.safetensors --save-latents " + dir + "/./n.safetensors")),
                        "is the input file of --noise");
  // Two outputs onto one file.
  expect_one_line_error(magi2(gen("--save-latents " + dir + "/a.json --metrics " + dir + "/a.json")),
                        "both name");
  EXPECT_FALSE(std::filesystem::exists(dir + "/a.json"));
}

TEST(CliErrors, FlagParsingErrorsAreOneLine) {
  expect_one_line_error(magi2("generat --model builtin:tiny"), "unknown command 'generat'");
  expect_one_line_error(magi2(gen("--num-inference-step 8")), "--num-inference-step");
  expect_one_line_error(magi2(gen("--num-inference-steps abc")), "abc");
  expect_one_line_error(magi2(gen("--seed 99999999999999999999 --save-latents /tmp/x.safetensors")), "--seed");
  expect_one_line_error(magi2(gen("--seed -1 --save-latents /tmp/x.safetensors")), "--seed");
}

// One failure status (README "Command line"): 1 whether CLI11 refuses the
// flags or the command refuses a value later; 0 for --help and --version.
TEST(CliErrors, ExitStatusIsOneForEveryFailure) {
  const std::string out = " --save-latents /tmp/magi2_exit_x.safetensors";
  for (const char* ok : {"--help", "--version", "generate --help", "serve --help"}) EXPECT_EQ(magi2(ok).rc, 0) << ok;
  const std::string bad_runs[] = {
      "",                                        // no command (CLI11)
      "generat",                                 // unknown command
      gen("--num-inference-step 8" + out),       // unknown flag (CLI11)
      gen("--num-inference-steps abc" + out),    // not a number (CLI11)
      gen("--moe-max-rows 0" + out),             // out of range (CLI11)
      gen("--threads 100000" + out),             // out of range (CLI11)
      "generate --prompt x --width 17 --height 64" + out,  // out of range (validate())
      gen("--seed -1" + out),                    // out of range (generate)
      "generate --prompt ' '" + out,             // blank prompt (validate())
      gen(""),                                   // no output
      "inspect /nonexistent/model"};             // missing input
  for (const std::string& bad : bad_runs) {
    const CliRun r = magi2(bad);
    EXPECT_EQ(r.rc, 1) << bad << "\n" << r.out;
  }
  EXPECT_FALSE(std::filesystem::exists("/tmp/magi2_exit_x.safetensors"));
}

TEST(CliErrors, MissingFiles) {
  expect_one_line_error(magi2("inspect /nonexistent/model"), "/nonexistent/model");
  expect_one_line_error(magi2("forward --transformer " + golden("ckpt") + " --config " + golden("config.json") +
                              " --inputs /nonexistent.safetensors -o /tmp/o.safetensors"),
                        "/nonexistent.safetensors");
  expect_one_line_error(magi2(gen("--noise /nonexistent_noise.safetensors --save-latents /tmp/x.safetensors")),
                        "/nonexistent_noise.safetensors");
}

TEST(CliErrors, MismatchedShapes) {
  // The golden dit_io noise is not what this request's latent shape needs (10 s clip).
  const std::string out = temp_dir("cli_shapes") + "/lat.safetensors";
  CliRun r = magi2("generate --model " + golden("") + " --transformer " + golden("ckpt") + " --text-features " +
                golden("dit_io.safetensors") + " --seconds 0.8 --width 96 --height 64 --noise " +
                golden("sampler.safetensors") + " --num-inference-steps 1 --save-latents " + out);
  expect_one_line_error(r, "initial video noise");
  EXPECT_FALSE(std::filesystem::exists(out));
  // A config whose arch does not fit the checkpoint: every mismatch in one error.
  expect_one_line_error(magi2("inspect " + golden("ckpt")), "does not match the DiT config");
}

TEST(CliErrors, PromptWithoutTextEncoderIsExplained) {
  // dit_tiny has no text_encoder/: the message names the missing folder and the ways around it.
  expect_one_line_error(magi2("generate --model " + golden("") + " --prompt hello --save-latents /tmp/x.safetensors"),
                        "--text-features");
}

TEST(CliErrors, NoOutput) { expect_one_line_error(magi2(gen("")), "--save-latents"); }

TEST(CliErrors, OutputsThatCannotBeWritten) {
  // Checked before any work: an MP4 needs the decoders, and a missing folder fails up front.
  expect_one_line_error(magi2(gen("-o /tmp/clip.mp4")), mp4_supported() ? "turbo_vae" : "no FFmpeg");
  expect_one_line_error(magi2(gen("--save-latents /nonexistent_dir/lat.safetensors")), "/nonexistent_dir");
  const std::string dir = temp_dir("cli_outputs");
  expect_one_line_error(magi2(gen("--save-latents " + dir)), "is a folder");
  // The metrics path is checked before the run, so no latents are written either.
  expect_one_line_error(magi2(gen("--save-latents " + dir + "/lat.safetensors --metrics /nonexistent_dir/m.json")),
                        "--metrics");
  EXPECT_FALSE(std::filesystem::exists(dir + "/lat.safetensors"));
}

}  // namespace
}  // namespace magi2::test
