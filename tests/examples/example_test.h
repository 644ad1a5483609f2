// What the examples' end-to-end tests share: a skip, saying why, where Fashion-MNIST is not
// installed, and a folder of the test's own (made empty before, removed after).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace ddp::test {

class ExampleTest : public ::testing::Test {
 protected:
  explicit ExampleTest(const std::string& prefix)
      : root_(std::filesystem::temp_directory_path() / (prefix + std::to_string(::getpid()))) {}
  void SetUp() override {
    if (!std::filesystem::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")) {
      GTEST_SKIP() << "Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)";
    }
    std::filesystem::remove_all(root_);
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  std::filesystem::path root_;
};

}  // namespace ddp::test
