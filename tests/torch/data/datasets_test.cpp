// FashionMNIST (the real files, and corrupt or truncated ones written here) and the synthetic
// dataset.
#include <gtest/gtest.h>
#include <unistd.h>

#include <ATen/ops/allclose.h>
#include <ATen/ops/bincount.h>
#include <ATen/ops/equal.h>

#include <array>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "ddp/error.h"
#include "ddp/torch/data/fashion_mnist.h"
#include "ddp/torch/data/synthetic.h"

namespace ddp::data {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<std::uint8_t>;

bool have_fashion_mnist() { return fs::exists(fs::path(FashionMNIST::kDefaultRoot) / "train-images-idx3-ubyte.gz"); }

// ---- Writing IDX files, gzip'd by hand (stored deflate blocks: an encoder independent of zlib) ----

std::uint32_t crc32(const Bytes& data) {
  std::uint32_t crc = 0xffffffffu;
  for (std::uint8_t byte : data) {
    crc ^= byte;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

Bytes gzip_stored(const Bytes& data) {
  Bytes out = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255};
  std::size_t at = 0;
  do {
    const std::size_t len = std::min<std::size_t>(data.size() - at, 65535);
    const bool last = at + len == data.size();
    out.push_back(last ? 1 : 0);
    out.push_back(static_cast<std::uint8_t>(len));
    out.push_back(static_cast<std::uint8_t>(len >> 8));
    out.push_back(static_cast<std::uint8_t>(~len));
    out.push_back(static_cast<std::uint8_t>(~len >> 8));
    out.insert(out.end(), data.begin() + static_cast<std::ptrdiff_t>(at),
               data.begin() + static_cast<std::ptrdiff_t>(at + len));
    at += len;
  } while (at < data.size());
  const std::uint32_t crc = crc32(data), size = static_cast<std::uint32_t>(data.size());
  for (int k = 0; k < 4; ++k) out.push_back(static_cast<std::uint8_t>(crc >> (8 * k)));
  for (int k = 0; k < 4; ++k) out.push_back(static_cast<std::uint8_t>(size >> (8 * k)));
  return out;
}

void put32(Bytes& out, std::uint32_t v) {
  for (int k = 3; k >= 0; --k) out.push_back(static_cast<std::uint8_t>(v >> (8 * k)));
}

Bytes idx_images(std::uint32_t count, std::uint32_t rows = 28, std::uint32_t cols = 28, std::uint32_t magic = 2051,
                 std::size_t data_bytes = SIZE_MAX) {
  Bytes out;
  put32(out, magic);
  put32(out, count);
  put32(out, rows);
  put32(out, cols);
  const std::size_t n = data_bytes == SIZE_MAX ? std::size_t{count} * rows * cols : data_bytes;
  for (std::size_t i = 0; i < n; ++i) out.push_back(static_cast<std::uint8_t>(i * 7 % 256));
  return out;
}

Bytes idx_labels(const Bytes& labels, std::uint32_t magic = 2049, std::int64_t count = -1) {
  Bytes out;
  put32(out, magic);
  put32(out, count < 0 ? static_cast<std::uint32_t>(labels.size()) : static_cast<std::uint32_t>(count));
  out.insert(out.end(), labels.begin(), labels.end());
  return out;
}

class FashionMnistFiles : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ddp_fashion_" + std::to_string(::getpid()) + "_" +
                                        testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const Bytes& bytes) {
    const fs::path path = dir_ / name;
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    return path.string();
  }
  // A small valid training split: 3 images, labels 9, 0, 5.
  void write_valid(const std::string& suffix = ".gz") {
    auto encode = [&](const Bytes& b) { return suffix == ".gz" ? gzip_stored(b) : b; };
    write("train-images-idx3-ubyte" + suffix, encode(idx_images(3)));
    write("train-labels-idx1-ubyte" + suffix, encode(idx_labels({9, 0, 5})));
  }
  std::string error_loading(FashionMNIST::Mode mode = FashionMNIST::Mode::kTrain) {
    try {
      FashionMNIST dataset(dir_.string(), mode);
    } catch (const IOError& e) {
      return e.what();
    }
    return "no IOError";
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

// ---- FashionMNIST on Debian's files ----

TEST(FashionMNIST, LoadsBothSplitsOfTheRealDataset) {
  if (!have_fashion_mnist())
    GTEST_SKIP() << "dataset-fashion-mnist is not installed (apt-get install dataset-fashion-mnist)";
  FashionMNIST train;
  ASSERT_EQ(train.size().value(), 60000u);
  EXPECT_TRUE(train.is_train());
  EXPECT_EQ(train.images().sizes(), (std::vector<std::int64_t>{60000, 1, 28, 28}));
  EXPECT_EQ(train.images().scalar_type(), at::kFloat);
  EXPECT_EQ(train.targets().scalar_type(), at::kLong);
  // Balanced: 6,000 of each class (counted by Python from the same files).
  EXPECT_TRUE(at::equal(at::bincount(train.targets()), at::full({10}, 6000, at::kLong)));
  // The normalization makes the training pixels mean 0, std 1.
  EXPECT_NEAR(train.images().mean().item<double>(), 0.0, 2e-4);
  EXPECT_NEAR(train.images().std().item<double>(), 1.0, 2e-4);
  // Known samples (Python: gzip + numpy): image 0 is an ankle boot whose pixels sum to 76,247,
  // pixel (14, 14) is 217; the last image is a sandal summing to 16,684.
  auto first = train.get(0);
  EXPECT_EQ(first.target.item<std::int64_t>(), 9);
  EXPECT_EQ(FashionMNIST::class_names()[9], "Ankle boot");
  EXPECT_EQ(first.data.sizes(), (std::vector<std::int64_t>{1, 28, 28}));
  auto raw = [](const at::Tensor& image) {
    return image.mul(FashionMNIST::kStd).add(FashionMNIST::kMean).mul(255.0).round();
  };
  EXPECT_EQ(raw(first.data).sum().item<double>(), 76247.0);
  EXPECT_EQ(raw(first.data)[0][14][14].item<double>(), 217.0);
  auto last = train.get(59999);
  EXPECT_EQ(last.target.item<std::int64_t>(), 5);
  EXPECT_EQ(raw(last.data).sum().item<double>(), 16684.0);

  FashionMNIST test(FashionMNIST::kDefaultRoot, FashionMNIST::Mode::kTest);
  ASSERT_EQ(test.size().value(), 10000u);
  EXPECT_FALSE(test.is_train());
  EXPECT_TRUE(at::equal(at::bincount(test.targets()), at::full({10}, 1000, at::kLong)));
  EXPECT_EQ(test.get(0).target.item<std::int64_t>(), 9);
  EXPECT_EQ(raw(test.get(0).data).sum().item<double>(), 33456.0);

  try {
    test.get(10000);
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "FashionMNIST::get: index 10000 is out of range for the test split of 10000 images");
  }
}

TEST(FashionMNIST, ClassNames) {
  const std::array<std::string_view, 10> expected = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                                     "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
  EXPECT_EQ(FashionMNIST::class_names(), expected);
}

TEST(FashionMNIST, CopiesShareTheTensors) {
  if (!have_fashion_mnist()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  FashionMNIST test(FashionMNIST::kDefaultRoot, FashionMNIST::Mode::kTest);
  FashionMNIST copy = test;
  EXPECT_EQ(copy.images().data_ptr(), test.images().data_ptr());
}

// ---- FashionMNIST on files written here ----

TEST_F(FashionMnistFiles, LoadsAValidSplitGzipOrPlain) {
  for (const std::string suffix : {".gz", ""}) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    write_valid(suffix);
    FashionMNIST data(dir_.string());
    ASSERT_EQ(data.size().value(), 3u) << suffix;
    EXPECT_EQ(data.get(0).target.item<std::int64_t>(), 9);
    EXPECT_EQ(data.get(1).target.item<std::int64_t>(), 0);
    EXPECT_EQ(data.get(2).target.item<std::int64_t>(), 5);
    // Pixel (5, 6) of image 1 is byte 784 + 5 * 28 + 6 of the data, written as i * 7 % 256.
    const double byte = (784 + 5 * 28 + 6) * 7 % 256;
    EXPECT_NEAR(data.get(1).data[0][5][6].item<float>(), (byte / 255.0 - 0.2860) / 0.3530, 1e-5);
  }
}

TEST_F(FashionMnistFiles, MissingFilesNameThePackageAndTheFlag) {
  const std::string message = error_loading();
  EXPECT_EQ(message, "FashionMNIST: no train-images-idx3-ubyte.gz (nor train-images-idx3-ubyte) in " + dir_.string() +
                         ". Install Debian's dataset-fashion-mnist package (apt-get install dataset-fashion-mnist; its "
                         "files go to /usr/share/datasets/fashion-mnist), or point the dataset's root argument (the "
                         "examples' --data-dir flag) at a directory holding train-images-idx3-ubyte.gz, "
                         "train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz, t10k-labels-idx1-ubyte.gz");
  write_valid();
  const std::string test_split = error_loading(FashionMNIST::Mode::kTest);
  EXPECT_EQ(test_split.rfind("FashionMNIST: no t10k-images-idx3-ubyte.gz (nor t10k-images-idx3-ubyte) in ", 0), 0u)
      << test_split;
  fs::remove(dir_ / "train-labels-idx1-ubyte.gz");
  const std::string labels = error_loading();
  EXPECT_EQ(labels.rfind("FashionMNIST: no train-labels-idx1-ubyte.gz (nor train-labels-idx1-ubyte) in ", 0), 0u)
      << labels;
}

TEST_F(FashionMnistFiles, BadMagicNumber) {
  write_valid();
  write("train-images-idx3-ubyte.gz", gzip_stored(idx_images(3, 28, 28, /*magic=*/2049)));
  EXPECT_EQ(error_loading(), "FashionMNIST: " + path("train-images-idx3-ubyte.gz") +
                                 ": not an IDX image file: magic number 2049, expected 2051 (the file is corrupt, or "
                                 "not what its name says)");
  write_valid();
  write("train-labels-idx1-ubyte.gz", gzip_stored(idx_labels({1, 2, 3}, /*magic=*/0x1f8b0800)));
  EXPECT_EQ(error_loading(), "FashionMNIST: " + path("train-labels-idx1-ubyte.gz") +
                                 ": not an IDX label file: magic number 529205248, expected 2049 (the file is "
                                 "corrupt, or not what its name says)");
}

TEST_F(FashionMnistFiles, WrongImageSize) {
  write_valid();
  write("train-images-idx3-ubyte.gz", gzip_stored(idx_images(3, 27, 28)));
  EXPECT_EQ(error_loading(), "FashionMNIST: " + path("train-images-idx3-ubyte.gz") +
                                 ": images are 27x28, expected 28x28: not Fashion-MNIST");
}

TEST_F(FashionMnistFiles, ImageAndLabelCountsDisagree) {
  write_valid();
  write("train-labels-idx1-ubyte.gz", gzip_stored(idx_labels({1, 2})));
  EXPECT_EQ(error_loading(), "FashionMNIST: " + path("train-images-idx3-ubyte.gz") + " holds 3 images but " +
                                 path("train-labels-idx1-ubyte.gz") +
                                 " holds 2 labels: the files do not belong together (a partial copy or a mix of "
                                 "versions?)");
}

TEST_F(FashionMnistFiles, DataShorterThanTheHeaderSays) {
  write_valid();
  write("train-images-idx3-ubyte.gz", gzip_stored(idx_images(5, 28, 28, 2051, /*data_bytes=*/2 * 784)));
  EXPECT_EQ(error_loading(), "FashionMNIST: " + path("train-images-idx3-ubyte.gz") +
                                 ": truncated: its header announces 5 x 28 x 28 bytes of image data (3920 bytes) but "
                                 "it holds only 1568");
  write_valid();
  write("train-labels-idx1-ubyte.gz", gzip_stored(idx_labels({1, 2}, 2049, /*count=*/3)));
  EXPECT_EQ(error_loading(),
            "FashionMNIST: " + path("train-labels-idx1-ubyte.gz") +
                ": truncated: its header announces 3 bytes of label data (3 bytes) but it holds only 2");
}

TEST_F(FashionMnistFiles, DataLongerThanTheHeaderSays) {
  write_valid();
  write("train-labels-idx1-ubyte.gz", gzip_stored(idx_labels({1, 2, 3, 4}, 2049, /*count=*/3)));
  EXPECT_EQ(error_loading(), "FashionMNIST: " + path("train-labels-idx1-ubyte.gz") +
                                 ": longer than its header announces (3 = 3 bytes of data): the file is corrupt");
}

TEST_F(FashionMnistFiles, EmptyOrHeaderOnlyFiles) {
  write_valid();
  write("train-images-idx3-ubyte.gz", Bytes{});
  EXPECT_EQ(error_loading(), "FashionMNIST: " + path("train-images-idx3-ubyte.gz") +
                                 ": only 0 bytes: too short for an IDX header (truncated or empty file)");
  Bytes header_only;
  put32(header_only, 2051);
  put32(header_only, 3);
  write("train-images-idx3-ubyte.gz", gzip_stored(header_only));
  EXPECT_EQ(error_loading(),
            "FashionMNIST: " + path("train-images-idx3-ubyte.gz") + ": truncated inside its header (dimension 1 of 3)");
}

TEST_F(FashionMnistFiles, AbsurdCountsInTheHeader) {
  write_valid();
  write("train-images-idx3-ubyte.gz", gzip_stored(idx_images(0xffffffffu, 28, 28, 2051, /*data_bytes=*/10)));
  EXPECT_EQ(error_loading(), "FashionMNIST: " + path("train-images-idx3-ubyte.gz") +
                                 ": its header announces more than 4 GiB of data: the header is corrupt");
}

TEST_F(FashionMnistFiles, TruncatedGzipStream) {
  write_valid();
  Bytes gz = gzip_stored(idx_images(3));
  gz.resize(gz.size() / 2);
  write("train-images-idx3-ubyte.gz", gz);
  EXPECT_EQ(error_loading(), "FashionMNIST: " + path("train-images-idx3-ubyte.gz") +
                                 ": cannot be decompressed (zlib: unexpected end of file): the file is corrupt or "
                                 "truncated; reinstall or re-download it");
}

TEST_F(FashionMnistFiles, CorruptGzipChecksum) {
  write_valid();
  Bytes gz = gzip_stored(idx_labels({1, 2, 3}));
  gz[gz.size() - 8] ^= 0xff;  // the CRC-32 of the trailer
  write("train-labels-idx1-ubyte.gz", gz);
  EXPECT_EQ(error_loading(), "FashionMNIST: " + path("train-labels-idx1-ubyte.gz") +
                                 ": cannot be decompressed (zlib: incorrect data check): the file is corrupt or "
                                 "truncated; reinstall or re-download it");
}

TEST_F(FashionMnistFiles, LabelOutOfRange) {
  write_valid();
  write("train-labels-idx1-ubyte.gz", gzip_stored(idx_labels({1, 12, 3})));
  EXPECT_EQ(error_loading(), "FashionMNIST: " + path("train-labels-idx1-ubyte.gz") +
                                 ": label 12 at index 1 is outside [0, 10): the file is corrupt");
}

// ---- SyntheticClassification ----

TEST(SyntheticClassification, DeterministicFromTheSeedInAnyOrder) {
  SyntheticClassification a({.size = 50, .shape = {1, 28, 28}, .num_classes = 10, .seed = 7});
  SyntheticClassification b({.size = 50, .shape = {1, 28, 28}, .num_classes = 10, .seed = 7});
  SyntheticClassification other({.size = 50, .shape = {1, 28, 28}, .num_classes = 10, .seed = 8});
  const auto later = a.get(31);
  for (std::size_t i : {5u, 31u, 0u}) {
    auto x = a.get(i), y = b.get(i);
    EXPECT_TRUE(at::equal(x.data, y.data));
    EXPECT_EQ(x.target.item<std::int64_t>(), y.target.item<std::int64_t>());
    EXPECT_FALSE(at::equal(x.data, other.get(i).data));
  }
  EXPECT_TRUE(at::equal(later.data, b.get(31).data));
  EXPECT_FALSE(at::equal(a.get(1).data, a.get(2).data));
  // Pinned values, computed by synthetic_reference.py (an independent reimplementation of the
  // documented algorithm): the data must not change between versions or machines.
  const auto sample = a.get(3);
  EXPECT_EQ(sample.data.sizes(), (std::vector<std::int64_t>{1, 28, 28}));
  EXPECT_EQ(sample.data.scalar_type(), at::kFloat);
  EXPECT_EQ(sample.target.scalar_type(), at::kLong);
  EXPECT_EQ(sample.target.dim(), 0);
  const at::Tensor flat = sample.data.flatten();
  EXPECT_EQ(sample.target.item<std::int64_t>(), 6);
  EXPECT_EQ(flat[0].item<float>(), 7551146 * 0x1p-23f);
  EXPECT_EQ(flat[100].item<float>(), -2822352 * 0x1p-23f);
  EXPECT_EQ(flat[783].item<float>(), 1542973 * 0x1p-23f);
}

TEST(SyntheticClassification, ValuesAndLabelsInRangeAndRoughlyBalanced) {
  SyntheticClassification data({.size = 2000, .shape = {1, 28, 28}, .num_classes = 10, .seed = 1});
  ASSERT_EQ(data.size().value(), 2000u);
  std::vector<int> count(10, 0);
  for (std::size_t i = 0; i < 2000; ++i) {
    auto sample = data.get(i);
    const auto label = sample.target.item<std::int64_t>();
    ASSERT_TRUE(label >= 0 && label < 10);
    ++count[static_cast<std::size_t>(label)];
    if (i < 20) {
      EXPECT_GE(sample.data.min().item<float>(), -1.0f);
      EXPECT_LT(sample.data.max().item<float>(), 1.0f);
    }
  }
  for (int c = 0; c < 10; ++c) EXPECT_GT(count[static_cast<std::size_t>(c)], 80) << "class " << c;  // 200 expected
}

// Learnable: the labels are linearly separable, so the multiclass perceptron (an algorithm that
// knows nothing of how the data were made) reaches a near-perfect training accuracy.
TEST(SyntheticClassification, APerceptronLearnsIt) {
  const std::int64_t n = 1500, features = 64, classes = 5;
  SyntheticClassification data({.size = n, .shape = {features}, .num_classes = classes, .seed = 3});
  std::vector<std::vector<float>> x(n);
  std::vector<std::int64_t> y(n);
  for (std::int64_t i = 0; i < n; ++i) {
    auto sample = data.get(static_cast<std::size_t>(i));
    const float* p = sample.data.data_ptr<float>();
    x[i].assign(p, p + features);
    y[i] = sample.target.item<std::int64_t>();
  }
  std::vector<double> w(classes * features, 0.0);
  auto predict = [&](std::int64_t i) {
    std::int64_t best = 0;
    double best_score = -1e300;
    for (std::int64_t c = 0; c < classes; ++c) {
      double s = 0;
      for (std::int64_t k = 0; k < features; ++k) s += w[c * features + k] * x[i][k];
      if (s > best_score) best_score = s, best = c;
    }
    return best;
  };
  for (int epoch = 0; epoch < 60; ++epoch) {
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t guess = predict(i);
      if (guess == y[i]) continue;
      for (std::int64_t k = 0; k < features; ++k) {
        w[y[i] * features + k] += x[i][k];
        w[guess * features + k] -= x[i][k];
      }
    }
  }
  std::int64_t right = 0;
  for (std::int64_t i = 0; i < n; ++i) right += predict(i) == y[i];
  EXPECT_GT(static_cast<double>(right) / n, 0.95);
}

TEST(SyntheticClassification, BadOptions) {
  auto error_of = [](SyntheticOptions options) -> std::string {
    try {
      SyntheticClassification data(options);
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    return "no InvalidArgument";
  };
  EXPECT_EQ(error_of({.size = -1}), "SyntheticClassification: size must be non-negative, got -1");
  EXPECT_EQ(error_of({.shape = {}}), "SyntheticClassification: shape must have at least one dimension");
  EXPECT_EQ(error_of({.shape = {3, 0}}), "SyntheticClassification: every dimension of shape must be at least 1, got 0");
  EXPECT_EQ(error_of({.shape = {1 << 16, 1 << 16}}),
            "SyntheticClassification: shape holds more than 2^31 values per input");
  EXPECT_EQ(error_of({.num_classes = 1}), "SyntheticClassification: num_classes must be at least 2, got 1");
  SyntheticClassification data({.size = 4});
  try {
    data.get(4);
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "SyntheticClassification::get: index 4 is out of range for 4 samples");
  }
}

}  // namespace
}  // namespace ddp::data
