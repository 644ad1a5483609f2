// Reading the environment through a function, so that the pure parts can be tested with any.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>

namespace ddp::launcher {

// The value of a variable, or nullopt when it is unset (an empty value counts as set).
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;

// This process's environment.
EnvLookup process_env();

// A lookup over a fixed map (for tests and for a worker's planned environment).
EnvLookup map_env(std::map<std::string, std::string> values);

}  // namespace ddp::launcher
