// The command-line table: every option of every subcommand has a MAGI2_*
// environment mirror (positionals excepted where noted), and within a
// subcommand no two options share one (llama.cpp's test-arg-parser idea).
#include <gtest/gtest.h>

#include <CLI/CLI.hpp>
#include <map>
#include <set>

#include "commands.h"

namespace magi2::test {
namespace {

TEST(ArgTable, EveryOptionHasAUniqueMagi2EnvMirror) {
  CLI::App app{"test", "magi2"};
  std::vector<cli::Command> cmds = cli::all_commands();
  for (auto& c : cmds) c.add(app);
  // Positionals that name the thing to act on, with no sensible environment default.
  const std::set<std::string> exempt = {"make-tiny:dir", "make-random:dir"};
  int options = 0;
  for (auto& c : cmds) {
    std::map<std::string, std::string> seen;
    for (const CLI::Option* o : c.sub->get_options()) {
      const std::string name = o->get_name(false, true);
      if (name == "-h,--help" || name == "--help") continue;
      ++options;
      const std::string key = c.sub->get_name() + ":" + o->get_name();
      if (exempt.count(key)) continue;
      const std::string env = o->get_envname();
      EXPECT_FALSE(env.empty()) << key << " has no environment mirror";
      EXPECT_EQ(env.rfind("MAGI2_", 0), 0u) << key << " mirror " << env << " lacks the MAGI2_ prefix";
      auto [it, inserted] = seen.emplace(env, key);
      EXPECT_TRUE(inserted) << env << " mirrors both " << it->second << " and " << key;
    }
  }
  EXPECT_GT(options, 20);
}

}  // namespace
}  // namespace magi2::test
