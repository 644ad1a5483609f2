// Checking an error path: the call must throw E (a ddp::Error subclass, say) whose message holds
// every fragment. Returns the message (empty when the check failed).
#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <initializer_list>
#include <string>

namespace ddp::test {

template <typename E, typename F>
std::string expect_error(F&& call, std::initializer_list<std::string> fragments) {
  try {
    call();
    ADD_FAILURE() << "no error";
  } catch (const E& e) {
    std::string message = e.what();
    for (const auto& f : fragments) {
      EXPECT_NE(message.find(f), std::string::npos) << "missing '" << f << "' in: " << message;
    }
    return message;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong error type: " << e.what();
  }
  return {};
}

}  // namespace ddp::test
