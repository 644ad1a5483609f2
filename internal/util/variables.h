// The environment variables a part of ddp reads, declared beside the code that uses them, one
// declaration each: the name, what it takes (README's words), and how its text sets one field of
// that part's settings. read_variables is the one reader, a pure function of a variable lookup.
// README's table is checked against every part's declarations (tests/torch/variables_test.cpp).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "util/launch_env.h"
#include "util/strings.h"

namespace ddp::detail {

// What reading found: values out of range (a sentence each; the field kept its default) and the
// first value that means nothing, as an error naming the variable, its value and what it takes.
struct VariableProblems {
  std::vector<std::string> warnings;
  std::string invalid;

  // Throws InvalidArgument(invalid) when a value means nothing.
  void check() const;
  // Logs each warning (at Warn).
  void log_warnings() const;
};

// One variable of a part whose settings are S.
template <class S>
struct Variable {
  std::string_view name;
  std::string_view takes;
  // Sets a field of `settings` from the variable's (non-empty) value.
  void (*read)(S& settings, std::string_view name, const std::string& value, VariableProblems& problems);
  std::string_view fallback = {};  // read instead when `name` is unset or empty
};

// A variable's name and words, whatever its part.
struct VariableInfo {
  std::string_view name;
  std::string_view takes;
};

// The value of `name` in `env`, or nullopt when it is unset or empty.
inline std::optional<std::string> nonempty_variable(const EnvLookup& env, std::string_view name) {
  auto value = env(std::string(name));
  if (!value || value->empty()) return std::nullopt;
  return value;
}

// The settings `variables` make from `env`, starting from S's defaults. Never throws for a value.
template <class S, std::size_t N>
S read_variables(const Variable<S> (&variables)[N], const EnvLookup& env, VariableProblems& problems) {
  S settings{};
  for (const auto& v : variables) {
    auto value = nonempty_variable(env, v.name);
    if (!value && !v.fallback.empty()) value = nonempty_variable(env, v.fallback);
    if (value) v.read(settings, v.name, *value, problems);
  }
  return settings;
}

template <class S, std::size_t N>
std::vector<VariableInfo> infos_of(const Variable<S> (&variables)[N]) {
  std::vector<VariableInfo> infos;
  for (const auto& v : variables) infos.push_back({v.name, v.takes});
  return infos;
}

// Every variable the core declares (its layers' tables), in their order.
std::vector<VariableInfo> core_variables();

// "0", "off", "false" or "no" in any case: a switch turned off.
bool is_off(std::string_view value);

// An integer from min to max; otherwise a warning ("... using the default") and nullopt.
std::optional<std::int64_t> integer_in(std::string_view name, const std::string& value, std::int64_t min,
                                       std::int64_t max, VariableProblems& problems);

// `base` with `overrides` in front: the variables a group was made with (ProcessGroupOptions::variables).
EnvLookup with_overrides(std::map<std::string, std::string> overrides, EnvLookup base = process_env());

// Readers for a field of S, for Variable::read.
template <class S, auto field>
void read_text(S& s, std::string_view, const std::string& value, VariableProblems&) {
  s.*field = value;
}
template <class S, auto field>
void read_switch(S& s, std::string_view, const std::string& value, VariableProblems&) {
  s.*field = !is_off(value);
}
template <class S, auto field, std::int64_t min, std::int64_t max>
void read_integer(S& s, std::string_view name, const std::string& value, VariableProblems& problems) {
  using T = std::remove_cvref_t<decltype(s.*field)>;
  if (auto v = integer_in(name, value, min, max, problems)) s.*field = T(*v);
}

}  // namespace ddp::detail
