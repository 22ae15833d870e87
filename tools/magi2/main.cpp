// magi2: the command-line entry point. Each subcommand lives in its own
// cmd_<name>.cpp and registers through commands.h. Every failure, flag
// parsing included, ends in one line "magi2: error: ..." and exit status 1.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include <CLI/CLI.hpp>

#include "commands.h"
#include "core/error.h"
#include "media/mp4.h"

namespace {

// Exit statuses (README "Command line"): 0 for success, --help and
// --version; 1 for every failure. One failure status, as llama.cpp and
// stable-diffusion.cpp have: a value out of range is refused while CLI11
// parses for some flags (--threads, --moe-max-rows) and after it for others
// (--width by the engine's validate(), --seed by generate), and scripts must
// not see that split in the status.
constexpr int kExitFailure = 1;

int fail(const std::string& msg) {
  std::string line = msg;
  for (char& ch : line)
    if (ch == '\n') ch = ' ';
  while (!line.empty() && line.back() == ' ') line.pop_back();
  std::fprintf(stderr, "magi2: error: %s\n", line.c_str());
  return kExitFailure;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"magi2: MAGI-2 Preview audio+video inference engine", "magi2"};
  app.require_subcommand(1);
  // The build's optional parts, so scripts and tests can tell what it writes (README "Command line").
#ifdef MAGI2_HAVE_CUDA
  constexpr const char* kCuda = "on";
#else
  constexpr const char* kCuda = "off";
#endif
  const char* mp4 = magi2::mp4_supported() ? "on" : "off";
  app.set_version_flag("--version", magi2::str_cat("magi2 0.1.0 (MP4 via FFmpeg: ", mp4, "; CUDA: ", kCuda, ")"));
  std::vector<magi2::cli::Command> cmds = magi2::cli::all_commands();
  for (auto& c : cmds) c.add(app);
  // CLI11 reports an unknown subcommand as "A subcommand is required"; name it instead.
  // A flag error points at the help that lists the flag: the subcommand's.
  std::string help = "magi2 --help";
  if (argc > 1 && argv[1][0] != '-') {
    std::string known;
    bool found = false;
    for (const auto& c : cmds) {
      found = found || c.sub->get_name() == argv[1];
      known += (known.empty() ? "" : ", ") + c.sub->get_name();
    }
    if (!found) return fail(magi2::str_cat("unknown command '", argv[1], "' (commands: ", known, ")"));
    help = magi2::str_cat("magi2 ", argv[1], " --help");
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {  // not app.exit(e): CLI11's codes (105, 106, ...) would leak out
    return fail(magi2::str_cat(e.what(), " (see ", help, ")"));
  }
  try {
    for (auto& c : cmds)
      if (c.parsed()) return c.run();
  } catch (const std::bad_alloc&) {
    return fail("out of memory");
  } catch (const std::exception& e) {
    return fail(e.what());
  }
  return 0;
}
