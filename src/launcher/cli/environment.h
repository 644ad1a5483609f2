// Reading the environment through a function, so that the pure parts can be tested with any.
#pragma once

#include <cstdlib>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>

namespace ddp::launcher {

// The value of a variable, or nullopt when it is unset (an empty value counts as set).
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;

// This process's environment.
inline EnvLookup process_env() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (!value) return std::nullopt;
    return std::string(value);
  };
}

// A lookup over a fixed map (for tests and for a worker's planned environment).
inline EnvLookup map_env(std::map<std::string, std::string> values) {
  return [values = std::move(values)](const std::string& name) -> std::optional<std::string> {
    auto it = values.find(name);
    if (it == values.end()) return std::nullopt;
    return it->second;
  };
}

}  // namespace ddp::launcher
