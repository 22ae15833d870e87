// `magi2 inspect`: stub, replaced below.
#include <CLI/CLI.hpp>

#include "commands.h"
#include "core/error.h"

namespace magi2::cli {

Command inspect_command() {
  Command c;
  c.add_fn = [](CLI::App& app) { return app.add_subcommand("inspect", "describe a model folder"); };
  c.run = []() -> int { throw Error("inspect: not implemented yet"); };
  return c;
}

}  // namespace magi2::cli
