// Subcommand registry for the magi2 binary.
#pragma once

#include <functional>
#include <memory>
#include <utility>
#include <vector>

namespace CLI {
class App;
}

namespace magi2::cli {

/// One subcommand: `add` registers its options on the app and returns the
/// subcommand; `run` executes it after parsing and returns the exit code.
struct Command {
  std::function<CLI::App*(CLI::App&)> add_fn;
  std::function<int()> run;
  CLI::App* sub = nullptr;
  void add(CLI::App& app) { sub = add_fn(app); }
  bool parsed() const;
};

/// A Command over one argument struct, made here from `init` and shared by
/// both closures: `add(app, args)` registers the subcommand and its options on
/// `app` (writing into args) and returns it; `run(args)` executes it after
/// parsing and returns the exit code.
template <typename Args, typename Run>
Command make_command(std::function<CLI::App*(CLI::App&, Args&)> add, Run run, Args init = {}) {
  auto args = std::make_shared<Args>(std::move(init));
  Command c;
  c.add_fn = [args, add = std::move(add)](CLI::App& app) { return add(app, *args); };
  c.run = [args, run]() { return run(*args); };
  return c;
}

Command inspect_command();
Command forward_command();
Command make_tiny_command();
Command make_random_command();
Command generate_command();
Command refine_command();  ///< `magi2 refine --latents FILE`: the 1080p refiner on saved preview latents
Command encode_text_command();
Command enhance_prompt_command();
Command serve_command();
Command bench_command();
Command quantize_command();

/// All subcommands, in help order.
std::vector<Command> all_commands();

}  // namespace magi2::cli
