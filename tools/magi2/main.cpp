// magi2: the command-line entry point. Each subcommand lives in its own
// cmd_<name>.cpp and registers through commands.h.
#include <cstdio>
#include <exception>

#include <CLI/CLI.hpp>

#include "commands.h"
#include "core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"magi2: MAGI-2 Preview inference engine (C++/CUDA)", "magi2"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "magi2 0.1.0");
  std::vector<magi2::cli::Command> cmds = magi2::cli::all_commands();
  for (auto& c : cmds) c.add(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    for (auto& c : cmds)
      if (c.parsed()) return c.run();
  } catch (const magi2::Error& e) {
    std::fprintf(stderr, "magi2: error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "magi2: error: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "magi2: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
