// Checking error paths and messages: one copy of each helper for every test binary.
#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <initializer_list>
#include <string>
#include <vector>

namespace ddp::test {

// Checks that `text` holds every fragment; a failure shows `context` (the whole output, say)
// instead of `text` when given.
inline void expect_contains(const std::string& text, const std::vector<std::string>& fragments,
                            const std::string& context = "") {
  for (const auto& f : fragments) {
    EXPECT_NE(text.find(f), std::string::npos) << "missing '" << f << "' in:\n" << (context.empty() ? text : context);
  }
}

// The message of the E that `call` throws, or "no error" when it returns (for tables of inputs,
// some of which are fine). Any other exception is the test's failure.
template <typename E, typename F>
std::string message_of(F&& call) {
  try {
    call();
  } catch (const E& e) {
    return e.what();
  }
  return "no error";
}

// The call must throw E (a ddp::Error subclass, say) whose message holds every fragment. Returns
// the message (empty when the check failed).

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
