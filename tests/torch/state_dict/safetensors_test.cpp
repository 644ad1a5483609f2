// The safetensors reader and writer without files: what the writer writes reads back, and a
// header that lies (offsets outside the data, sizes that disagree with the shape, overlaps,
// gaps, a huge length, bad JSON) is refused with the fault named.
#include <gtest/gtest.h>

#include <string>

#include "ddp/error.h"
#include "state_dict/safetensors_file.h"
#include "support/expect_error.h"

namespace ddp::detail::weights {
namespace {

using namespace std::string_literals;

// A file of `header` (as written) and `data`.
std::string file(const std::string& header, const std::string& data) {
  std::string out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((header.size() >> (8 * i)) & 0xFF));
  return out + header + data;
}

std::string error_of(const std::string& bytes) {
  return test::message_of<IOError>([&] { read_safetensors(bytes); });
}

TEST(Safetensors, WritesWhatItReadsWithMetadataAndAlignedData) {
  Weights w;
  w.storages.push_back({ElementType::Float32, 6, std::string(24, 'a')});
  w.storages.push_back({ElementType::Bool, 3, "\x01\x00\x01"s});
  w.storages.push_back({ElementType::BFloat16, 0, ""});
  w.storages.push_back({ElementType::Int64, 1, std::string(8, 'c')});
  w.tensors.push_back({"w\"eird\\name\n", {ElementType::Float32, {2, 3}, {3, 1}, 0, 0}});
  w.tensors.push_back({"mask", {ElementType::Bool, {3}, {1}, 0, 1}});
  w.tensors.push_back({"empty", {ElementType::BFloat16, {0, 4}, {4, 1}, 0, 2}});
  w.tensors.push_back({"scalar", {ElementType::Int64, {}, {}, 0, 3}});
  w.metadata = {{"format", "pt"}, {"note", "\xc3\xa9t\xc3\xa9 \"quoted\""}};
  const auto bytes = write_safetensors(w);
  std::uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = (length << 8) | static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)]);
  EXPECT_EQ((8 + length) % 8, 0u) << "the data starts 8-byte aligned";
  EXPECT_EQ(bytes[8], '{');
  const auto back = read_safetensors(bytes);
  EXPECT_EQ(back.format, "safetensors");
  EXPECT_EQ(back.metadata, w.metadata);
  ASSERT_EQ(back.tensors.size(), w.tensors.size());
  for (std::size_t i = 0; i < w.tensors.size(); ++i) {
    const auto& [name, t] = back.tensors[i];
    EXPECT_EQ(name, w.tensors[i].first);
    EXPECT_EQ(t.type, w.tensors[i].second.type);
    EXPECT_EQ(t.sizes, w.tensors[i].second.sizes);
    EXPECT_EQ(t.strides, w.tensors[i].second.strides);
    EXPECT_EQ(back.storages[t.storage].bytes, w.storages[w.tensors[i].second.storage].bytes) << name;
  }
}

TEST(Safetensors, ReadsHeadersAsOtherWritersWriteThem) {
  // Fields in another order, whitespace, escapes, a null __metadata__, tensors out of data order.
  const auto bytes = file(
      " {\n \"b\" : {\"data_offsets\": [4, 6], \"shape\": [1], \"dtype\": \"F16\"},\n"
      "  \"\\u0061\\ud83d\\ude00\": {\"dtype\":\"I32\",\"shape\":[],\"data_offsets\":[0,4]},"
      "  \"__metadata__\": null }   ",
      "abcdef");
  // The header must start with '{' for the format to be recognised, but the reader is lenient.
  const auto w = read_safetensors(bytes);
  ASSERT_EQ(w.tensors.size(), 2u);
  EXPECT_EQ(w.tensors[0].first, "a\xf0\x9f\x98\x80");  // data order
  EXPECT_EQ(w.storages[w.tensors[0].second.storage].bytes, "abcd");
  EXPECT_EQ(w.tensors[1].first, "b");
  EXPECT_EQ(w.tensors[1].second.type, ElementType::Float16);
  EXPECT_TRUE(w.metadata.empty());
  // Bool bytes other than 0 and 1 are read as true.
  const auto bools = read_safetensors(file(R"({"m":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})", "\x00\x07"s));
  EXPECT_EQ(bools.storages[0].bytes, "\x00\x01"s);
}

TEST(Safetensors, RefusesAHeaderThatLies) {
  const std::string t = R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  EXPECT_EQ(error_of(file(t, std::string(8, 'x'))), "no error");
  EXPECT_NE(error_of(file(t, std::string(4, 'x')))
                .find("data_offsets [0, 8] lie outside the data (4 bytes after the header)"),
            std::string::npos)
      << error_of(file(t, std::string(4, 'x')));
  EXPECT_NE(error_of(file(R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", std::string(8, 'x')))
                .find("is float32 [3], 12 bytes, but its data_offsets [0, 8] hold 8"),
            std::string::npos);
  EXPECT_NE(error_of(file(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", std::string(8, 'x')))
                .find("lie outside the data"),
            std::string::npos);
  EXPECT_NE(error_of(file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                          R"("b":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})",
                          std::string(6, 'x')))
                .find("tensor \"b\" starts at data byte 2, but the tensors before it end at 4: they overlap"),
            std::string::npos);
  EXPECT_NE(error_of(file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", std::string(8, 'x')))
                .find("starts at data byte 4, but the tensors before it end at 0: a gap"),
            std::string::npos);
  EXPECT_NE(error_of(file(t, std::string(12, 'x'))).find("the tensors cover 8 of the 12 data bytes"),
            std::string::npos);
  EXPECT_NE(error_of(file(R"({"t":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,8]}})", ""))
                .find("which is too large"),
            std::string::npos);
  EXPECT_NE(error_of(file(R"({"t":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]}})", "x"))
                .find("has dtype \"F8_E4M3\"; ddp reads F32"),
            std::string::npos);
}

TEST(Safetensors, RefusesAHeaderLengthPastTheFileOrOverTheLimit) {
  std::string huge = file("{}", "");
  huge[7] = '\x7f';  // 2^63-ish
  EXPECT_NE(error_of(huge).find("more than the 100000000 allowed"), std::string::npos) << error_of(huge);
  std::string past = file("{}", "");
  past[0] = 100;
  EXPECT_NE(error_of(past).find("truncated: the safetensors header length is 100 bytes, but only 2 follow it"),
            std::string::npos)
      << error_of(past);
  EXPECT_NE(error_of("\x02\x00\x00"s).find("truncated: 3 bytes"), std::string::npos);
}

TEST(Safetensors, RefusesJsonThatIsNotAHeader) {
  const std::pair<std::string, std::string> cases[] = {
      {R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]})", "expected '}' but it ends"},
      {R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}})", "has the field \"x\" twice or unknown"},
      {R"({"t":{"dtype":"F32","shape":[1],"dtype":"F32","data_offsets":[0,4]}})", "twice or unknown"},
      {R"({"t":{"dtype":"F32","shape":[1]}})", "lacks its dtype, shape or data_offsets"},
      {R"({"t":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", "a negative number"},
      {R"({"t":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", "not an integer"},
      {R"({"t":{"dtype":"F32","shape":[01],"data_offsets":[0,4]}})", "a leading zero"},
      {R"({"t":{"dtype":"F32","shape":[99999999999999999999],"data_offsets":[0,4]}})", "a number too large"},
      {R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}})", "a list of more than 2 numbers"},
      {R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"t":{}})", "the name \"t\" appears twice"},
      {R"({"__metadata__":{"k":1}})", "metadata \"k\" is not a string"},
      {R"({"__metadata__":{"k":"a","k":"b"}})", "the metadata key \"k\" appears twice"},
      {R"({"t\x":1})", "the escape \\x inside a string"},
      {R"({"\ud800":1})", "half of a surrogate pair"},
      {"{\"t\n\":1}", "a control character inside a string"},
      {R"({} {})", "text after the header's closing brace"},
      {"{\"\xff\":1}", "it is not UTF-8"},
  };
  for (const auto& [header, fault] : cases) {
    const auto error = error_of(file(header, "xxxx"));
    EXPECT_NE(error.find(fault), std::string::npos) << header << "\n -> " << error;
  }
}

TEST(Safetensors, TheWriterRefusesViews) {
  Weights w;
  w.storages.push_back({ElementType::Float32, 4, std::string(16, 'a')});
  w.tensors.push_back({"t", {ElementType::Float32, {2}, {2}, 0, 0}});
  EXPECT_THROW(write_safetensors(w), InvalidArgument);
}

}  // namespace
}  // namespace ddp::detail::weights
