// Options that take one value of a fixed list, with their MAGI2_* env mirror:
// one place for how such a value is checked and how a bad one is reported,
// whether it came from the flag or from the environment.
#pragma once

#include <string>
#include <vector>

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace magi2::cli {

/// Adds `flag` (e.g. "--linear-compute") to `app`, writing to `dst`: one of
/// `choices`, with the env mirror `env` (e.g. "MAGI2_LINEAR_COMPUTE") and the
/// default shown in --help. Other values are refused at parse time: a bad flag
/// value by the flag's name (CLI11's message), a bad env value by the variable
/// and its value, e.g. "MAGI2_LINEAR_COMPUTE='fp9' (the env mirror of
/// --linear-compute): expected bf16 or fp8", and only when `app` is the
/// subcommand that runs. The flag wins over the env var; an empty env var
/// counts as unset (CLI11's rule), so the default applies.
CLI::Option* add_choice_option(CLI::App* app, const char* flag, std::string& dst, const std::string& help,
                               const std::vector<std::string>& choices, const char* env);

}  // namespace magi2::cli
