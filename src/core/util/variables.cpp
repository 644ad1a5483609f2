#include "util/variables.h"

#include <cctype>

#include "ddp/error.h"
#include "util/log.h"

namespace ddp::detail {

void VariableProblems::check() const {
  if (!invalid.empty()) throw InvalidArgument(invalid);
}

void VariableProblems::log_warnings() const {
  for (const auto& warning : warnings) log(LogLevel::Warn, warning);
}

bool is_off(std::string_view value) {
  std::string lower(value);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower == "0" || lower == "off" || lower == "false" || lower == "no";
}

std::optional<std::int64_t> integer_in(std::string_view name, const std::string& value, std::int64_t min,
                                       std::int64_t max, VariableProblems& problems) {
  auto v = parse_int(value);
  if (!v || *v < min || *v > max) {
    problems.warnings.push_back(
        cat(name, "=", quote(value), " is not an integer from ", min, " to ", max, "; using the default"));
    return std::nullopt;
  }
  return v;
}

EnvLookup with_overrides(std::map<std::string, std::string> overrides, EnvLookup base) {
  if (overrides.empty()) return base;
  return [overrides = std::move(overrides), base = std::move(base)](const std::string& name) {
    auto it = overrides.find(name);
    return it != overrides.end() ? std::optional<std::string>(it->second) : base(name);
  };
}

}  // namespace ddp::detail
