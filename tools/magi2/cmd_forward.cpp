// `magi2 forward`: one DiT forward on packed inputs (testing and parity).
#include <CLI/CLI.hpp>
#include <memory>

#include "commands.h"
#include "core/error.h"

namespace magi2::cli {

Command forward_command() {
  Command c;
  c.add_fn = [](CLI::App& app) { return app.add_subcommand("forward", "run one DiT forward on packed inputs"); };
  c.run = []() -> int { throw Error("forward: not implemented yet"); };
  return c;
}

}  // namespace magi2::cli
