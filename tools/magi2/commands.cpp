#include "commands.h"

#include <CLI/CLI.hpp>

namespace magi2::cli {

bool Command::parsed() const { return sub != nullptr && sub->parsed(); }

std::vector<Command> all_commands() {
  return {generate_command(), refine_command(), encode_text_command(), enhance_prompt_command(), inspect_command(),
          forward_command(), make_tiny_command(), make_random_command(), quantize_command(), serve_command(), bench_command()};
}

}  // namespace magi2::cli
