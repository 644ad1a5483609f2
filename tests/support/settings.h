// A group's DDP_* settings for a test: the process's, with one change, handed to that group
// (InitOptions::settings, ProcessGroupOptions::settings) instead of set in the process's
// environment, where it would outlive the test.
#pragma once

#include <functional>

#include "ddp/detail/settings.h"

namespace ddp::test {

inline detail::Settings settings_with(const std::function<void(detail::Settings&)>& change) {
  detail::Settings settings = detail::process_settings();
  change(settings);
  return settings;
}

}  // namespace ddp::test
