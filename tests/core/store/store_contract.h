// The behaviour every Store must have, checked against each implementation.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "ddp/error.h"
#include "ddp/store.h"

namespace ddp::test {

inline void check_store_contract(Store& store) {
  using namespace std::chrono_literals;
  // set / get, binary values, overwrite
  const std::string binary("\0\1\2\xff value", 10);
  store.set("bin", binary);
  EXPECT_EQ(store.get("bin"), binary);
  store.set("bin", "replaced");
  EXPECT_EQ(store.get("bin"), "replaced");
  store.set("empty", "");
  EXPECT_EQ(store.get("empty"), "");

  // add: atomic counter stored as text
  EXPECT_EQ(store.add("counter", 5), 5);
  EXPECT_EQ(store.add("counter", -2), 3);
  EXPECT_EQ(store.get("counter"), "3");
  EXPECT_EQ(store.add("counter", 0), 3);
  store.set("not-a-number", "abc");
  EXPECT_THROW(store.add("not-a-number", 1), InvalidArgument);

  // compare_set, PyTorch semantics
  EXPECT_EQ(store.compare_set("cas", "", "first"), "first");         // missing + empty expected: set
  EXPECT_EQ(store.compare_set("cas", "wrong", "second"), "first");   // mismatch: unchanged
  EXPECT_EQ(store.compare_set("cas", "first", "second"), "second");  // match: set
  EXPECT_EQ(store.compare_set("cas-missing", "x", "y"), "x");        // missing + non-empty expected
  EXPECT_FALSE(store.check({"cas-missing"}));

  // check / wait
  EXPECT_TRUE(store.check({"bin", "counter"}));
  EXPECT_FALSE(store.check({"bin", "absent"}));
  store.wait({"bin", "counter"}, 1s);
  try {
    store.wait({"bin", "absent"}, 100ms);
    ADD_FAILURE() << "wait for a missing key did not time out";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("absent"), std::string::npos) << e.what();
  }
  try {
    store.get("absent-too", 100ms);
    ADD_FAILURE() << "get of a missing key did not time out";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("absent-too"), std::string::npos) << e.what();
  }

  // multi_get: the values in the keys' order; a timeout names the keys still missing
  EXPECT_EQ(store.multi_get({"counter", "bin", "empty", "counter"}),
            (std::vector<std::string>{"3", "replaced", "", "3"}));
  EXPECT_EQ(store.multi_get({}), std::vector<std::string>{});
  try {
    store.multi_get({"bin", "absent-many"}, 100ms);
    ADD_FAILURE() << "multi_get of a missing key did not time out";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("absent-many"), std::string::npos) << e.what();
  }

  // delete_key, num_keys
  const auto before = store.num_keys();
  store.set("doomed", "x");
  EXPECT_EQ(store.num_keys(), before + 1);
  EXPECT_TRUE(store.delete_key("doomed"));
  EXPECT_FALSE(store.delete_key("doomed"));
  EXPECT_EQ(store.num_keys(), before);
  EXPECT_FALSE(store.check({"doomed"}));
}

}  // namespace ddp::test
