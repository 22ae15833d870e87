#include "choice_option.h"

#include <CLI/CLI.hpp>
#include <algorithm>

#include "core/error.h"

namespace magi2::cli {

namespace {

// "a", "a or b", "a, b or c": the choices as the error lists them.
std::string choices_text(const std::vector<std::string>& choices) {
  std::string s;
  for (size_t i = 0; i < choices.size(); ++i)
    s += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + choices[i];
  return s;
}

}  // namespace

CLI::Option* add_choice_option(CLI::App* app, const char* flag, std::string& dst, const std::string& help,
                               const std::vector<std::string>& choices, const char* env) {
  CLI::Option* opt = app->add_option(flag, dst, help);
  const CLI::IsMember member(choices);
  // CLI11 reads `env` only when the flag is absent from the command line, and
  // only command-line values enter the app's parse order: a refused value
  // outside it came from the env var. CLI11 would prefix a returned message
  // with the flag's name, so that error is thrown as a ParseError (which the
  // validator wrapper does not catch) to name the variable first. CLI11 also
  // fills and checks the options of the subcommands that did not run (refine
  // shares generate's): those values are never used, so they are not judged.
  auto check = [app, opt, member, choices, env = std::string(env)](std::string& value) -> std::string {
    if (!app->parsed()) return {};
    std::string v = value;
    std::string flag_error = member(v);
    if (flag_error.empty()) return {};
    const std::vector<CLI::Option*>& given = app->parse_order();
    if (std::find(given.begin(), given.end(), opt) != given.end()) return flag_error;
    throw CLI::ParseError(str_cat(env, "='", value, "' (the env mirror of ", opt->get_name(),
                                  "): expected ", choices_text(choices)),
                          CLI::ExitCodes::ValidationError);
  };
  return opt->check(CLI::Validator(check, member.get_description()))->envname(env)->capture_default_str();
}

}  // namespace magi2::cli
