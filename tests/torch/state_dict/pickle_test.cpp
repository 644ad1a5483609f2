// The pickle subset reader and the state dict writer, without files: pickles that Python's own
// pickle module wrote, ours read back, and hostile ones refused with the fault named.
#include <gtest/gtest.h>

#include <string>

#include "ddp/error.h"
#include "state_dict/pickle_reader.h"
#include "state_dict/pickle_writer.h"
#include "support/expect_error.h"

namespace ddp::detail::pickle {
namespace {

using namespace std::string_literals;  // "..."s: literals with NUL bytes in them
using Kind = Value::Kind;
using weights::ElementType;

// What the tests look up in a read pickle.
const Value& entry(const Pickle& p, std::size_t dict, const std::string& key) {
  const auto& items = p.values[dict].items;
  for (std::size_t i = 0; i + 1 < items.size(); i += 2) {
    if (p.values[items[i]].kind == Kind::String && p.values[items[i]].text == key) return p.values[items[i + 1]];
  }
  ADD_FAILURE() << "no key " << key;
  static const Value none;
  return none;
}

std::string error_of(std::string_view bytes, PersistentIds ids = PersistentIds::Zip) {
  return test::message_of<IOError>([&] { read(bytes, ids); });
}

// pickle.dumps({"a": [1, -1, 300, -70000, 2**40, -2**63, 2**70], "b": (1.5, None, True, False),
//               "c": b"\x00\xff", "d": OrderedDict(x="y"), "é": "ü"}, protocol) in Python 3.11.
const std::string kPython2(
    "\x80\x02\x7d\x71\x00\x28\x58\x01\x00\x00\x00\x61\x71\x01\x5d\x71\x02\x28\x4b\x01\x4a\xff\xff\xff\xff\x4d\x2c\x01"
    "\x4a\x90\xee\xfe\xff\x8a\x06\x00\x00\x00\x00\x00\x01\x8a\x08\x00\x00\x00\x00\x00\x00\x00\x80\x8a\x09\x00\x00\x00"
    "\x00\x00\x00\x00\x00\x40\x65\x58\x01\x00\x00\x00\x62\x71\x03\x28\x47\x3f\xf8\x00\x00\x00\x00\x00\x00\x4e\x88\x89"
    "\x74\x71\x04\x58\x01\x00\x00\x00\x63\x71\x05\x63\x5f\x63\x6f\x64\x65\x63\x73\x0a\x65\x6e\x63\x6f\x64\x65\x0a\x71"
    "\x06\x58\x03\x00\x00\x00\x00\xc3\xbf\x71\x07\x58\x06\x00\x00\x00\x6c\x61\x74\x69\x6e\x31\x71\x08\x86\x71\x09\x52"
    "\x71\x0a\x58\x01\x00\x00\x00\x64\x71\x0b\x63\x63\x6f\x6c\x6c\x65\x63\x74\x69\x6f\x6e\x73\x0a\x4f\x72\x64\x65\x72"
    "\x65\x64\x44\x69\x63\x74\x0a\x71\x0c\x29\x52\x71\x0d\x58\x01\x00\x00\x00\x78\x71\x0e\x58\x01\x00\x00\x00\x79\x71"
    "\x0f\x73\x58\x02\x00\x00\x00\xc3\xa9\x71\x10\x58\x02\x00\x00\x00\xc3\xbc\x71\x11\x75\x2e",
    218);
const std::string kPython4(
    "\x80\x04\x95\x8d\x00\x00\x00\x00\x00\x00\x00\x7d\x94\x28\x8c\x01\x61\x94\x5d\x94\x28\x4b\x01\x4a\xff\xff\xff\xff"
    "\x4d\x2c\x01\x4a\x90\xee\xfe\xff\x8a\x06\x00\x00\x00\x00\x00\x01\x8a\x08\x00\x00\x00\x00\x00\x00\x00\x80\x8a\x09"
    "\x00\x00\x00\x00\x00\x00\x00\x00\x40\x65\x8c\x01\x62\x94\x28\x47\x3f\xf8\x00\x00\x00\x00\x00\x00\x4e\x88\x89\x74"
    "\x94\x8c\x01\x63\x94\x43\x02\x00\xff\x94\x8c\x01\x64\x94\x8c\x0b\x63\x6f\x6c\x6c\x65\x63\x74\x69\x6f\x6e\x73\x94"
    "\x8c\x0b\x4f\x72\x64\x65\x72\x65\x64\x44\x69\x63\x74\x94\x93\x94\x29\x52\x94\x8c\x01\x78\x94\x8c\x01\x79\x94\x73"
    "\x8c\x02\xc3\xa9\x94\x8c\x02\xc3\xbc\x94\x75\x2e",
    152);

class PythonPickles : public ::testing::TestWithParam<int> {};

TEST_P(PythonPickles, ReadAsPythonWroteThem) {
  const std::string& bytes = GetParam() == 2 ? kPython2 : kPython4;
  const Pickle p = read(bytes + "trailing bytes are not read", PersistentIds::None);
  EXPECT_EQ(p.size, bytes.size());
  ASSERT_EQ(p.values[p.root].kind, Kind::Dict);
  const auto& a = entry(p, p.root, "a");
  ASSERT_EQ(a.kind, Kind::List);
  ASSERT_EQ(a.items.size(), 7u);
  const std::int64_t ints[] = {1, -1, 300, -70000, std::int64_t{1} << 40, INT64_MIN};
  for (std::size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(p.values[a.items[i]].kind, Kind::Int) << i;
    EXPECT_EQ(p.values[a.items[i]].number, ints[i]) << i;
  }
  EXPECT_EQ(p.values[a.items[6]].kind, Kind::BigInt);  // 2**70 does not fit
  EXPECT_EQ(p.values[a.items[6]].text, std::string("\0\0\0\0\0\0\0\0\x40", 9));
  const auto& b = entry(p, p.root, "b");
  ASSERT_EQ(b.kind, Kind::Tuple);
  ASSERT_EQ(b.items.size(), 4u);
  EXPECT_EQ(p.values[b.items[0]].real, 1.5);
  EXPECT_EQ(p.values[b.items[1]].kind, Kind::None);
  EXPECT_EQ(p.values[b.items[2]].number, 1);
  EXPECT_EQ(p.values[b.items[3]].number, 0);
  EXPECT_EQ(entry(p, p.root, "c").kind, Kind::Bytes);
  EXPECT_EQ(entry(p, p.root, "c").text, std::string("\x00\xff", 2));
  const auto& d = entry(p, p.root, "d");
  EXPECT_EQ(describe(p, p.root), "a dict");
  ASSERT_EQ(d.kind, Kind::Dict);
  EXPECT_EQ(d.text, "OrderedDict");
  EXPECT_EQ(entry(p, p.root, "\xc3\xa9").text, "\xc3\xbc");
}

INSTANTIATE_TEST_SUITE_P(Protocols, PythonPickles, ::testing::Values(2, 4));

weights::Weights sample() {
  weights::Weights w;
  w.storages.push_back({ElementType::Float32, 6, std::string(24, '\1')});
  w.storages.push_back({ElementType::Int64, 1, std::string(8, '\2')});
  w.tensors.push_back({"layer.weight", {ElementType::Float32, {2, 3}, {3, 1}, 0, 0}});
  w.tensors.push_back({"layer.weight_t", {ElementType::Float32, {3, 2}, {1, 3}, 0, 0}});  // shares storage 0
  w.tensors.push_back({"row", {ElementType::Float32, {3}, {1}, 3, 0}});
  w.tensors.push_back({"count", {ElementType::Int64, {}, {}, 0, 1}});
  return w;
}

TEST(PickleWriter, WritesWhatTheReaderReadsBackTensorForTensor) {
  const auto w = sample();
  const auto p = read(write_state_dict(w), PersistentIds::Zip);
  ASSERT_EQ(p.values[p.root].kind, Kind::Dict);
  EXPECT_EQ(p.values[p.root].text, "OrderedDict");
  ASSERT_EQ(p.storages.size(), 2u);
  EXPECT_EQ(p.storages[0].key, "0");
  EXPECT_EQ(p.storages[0].numel, 6u);
  EXPECT_EQ(p.storages[0].location, "cpu");
  EXPECT_EQ(p.storages[1].type, ElementType::Int64);
  const auto& items = p.values[p.root].items;
  ASSERT_EQ(items.size(), 2 * w.tensors.size());
  for (std::size_t i = 0; i < w.tensors.size(); ++i) {
    EXPECT_EQ(p.values[items[2 * i]].text, w.tensors[i].first);
    const auto& value = p.values[items[2 * i + 1]];
    ASSERT_EQ(value.kind, Kind::Tensor);
    const auto& t = p.tensors[static_cast<std::size_t>(value.number)];
    EXPECT_EQ(t.sizes, w.tensors[i].second.sizes);
    EXPECT_EQ(t.strides, w.tensors[i].second.strides);
    EXPECT_EQ(t.offset, w.tensors[i].second.offset);
    EXPECT_EQ(t.storage, w.tensors[i].second.storage);
    EXPECT_EQ(t.type, w.tensors[i].second.type);
  }
}

TEST(PickleWriter, WritesIntegersOfEverySizeAndManyDimensions) {
  weights::Weights w;
  w.storages.push_back({ElementType::UInt8, 1, "x"});
  // Sizes of 1 with strides that span each integer encoding (the reader checks only the last element).
  const std::vector<std::int64_t> strides = {0, 255, 256, 65535, 65536, INT32_MAX, std::int64_t{1} << 40};
  w.tensors.push_back({"t", {ElementType::UInt8, std::vector<std::int64_t>(strides.size(), 1), strides, 0, 0}});
  const auto p = read(write_state_dict(w), PersistentIds::Zip);
  ASSERT_EQ(p.tensors.size(), 1u);
  EXPECT_EQ(p.tensors[0].strides, strides);
}

TEST(PickleReader, RefusesCodeWithTheWayToResave) {
  // torch.save(model): the first global is the model's class.
  const auto whole_model = "\x80\x02\x63__main__\nNet\nq\x00)\x81q\x01}q\x02b."s;
  const auto error = error_of(whole_model);
  EXPECT_NE(error.find("the pickle needs the Python object \"__main__.Net\", which is code, not data"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("torch.save(model.state_dict(), \"model.pt\")"), std::string::npos) << error;
  // The classic: os.system by REDUCE.
  EXPECT_NE(error_of("\x80\x02\x63os\nsystem\nX\x02\x00\x00\x00lsq\x00\x85R."s).find("\"os.system\", which is code"),
            std::string::npos);
  EXPECT_NE(error_of("\x80\x04\x8c\x08\x62uiltins\x8c\x04\x65val\x93."s).find("\"builtins.eval\""), std::string::npos);
  // Opcodes that build arbitrary objects are refused even without a global.
  EXPECT_NE(error_of("\x80\x02(\x81."s).find("NEWOBJ (0x81)"), std::string::npos);
  EXPECT_NE(error_of("\x80\x02(io\nx\n."s).find("INST (0x69)"), std::string::npos);
  // A storage class is data only inside a persistent id.
  EXPECT_NE(error_of("\x80\x02\x63torch\nFloatStorage\n)R."s).find("torch.FloatStorage called"), std::string::npos);
}

TEST(PickleReader, NamesTheFaultOfDamagedPickles) {
  EXPECT_NE(error_of("").find("truncated: the pickle ends without its STOP opcode (pickle byte 0)"), std::string::npos);
  EXPECT_NE(error_of("\x80\x02X\x10\x00\x00\x00"
                     "abc"s)
                .find("truncated: opcode BINUNICODE (0x58) needs 16 more bytes, 3 are left (pickle byte 2)"),
            std::string::npos)
      << error_of(
             "\x80\x02X\x10\x00\x00\x00"
             "abc"s);
  EXPECT_NE(error_of("\x80\x02\x8e\xff\xff\xff\xff\xff\xff\xff\xff"s).find("needs 18446744073709551615 more bytes"),
            std::string::npos);
  EXPECT_NE(error_of("\x80\x02h\x05."s).find("BINGET (0x68) of memo entry 5, which was never stored"),
            std::string::npos);
  EXPECT_NE(error_of("\x80\x02s.").find("nothing on the stack"), std::string::npos);
  EXPECT_NE(error_of("\x80\x02K\x01K\x02s.").find("nothing on the stack"), std::string::npos);
  EXPECT_NE(error_of("\x80\x02]K\x01K\x02s.").find("SETITEM (0x73) into a list, not a dict"), std::string::npos);
  EXPECT_NE(error_of("\x80\x02K\x01u.").find("SETITEMS (0x75) without a MARK"), std::string::npos);
  EXPECT_NE(error_of("\x80\x02\xff.").find("0xff is not a pickle opcode"), std::string::npos);
  EXPECT_NE(error_of("\x80\x01.").find("pickle protocol 1"), std::string::npos);
  EXPECT_NE(error_of("\x80\x02I1\n.").find("INT (0x49)"), std::string::npos);
  EXPECT_NE(error_of("\x80\x02X\x01\x00\x00\x00\xff."s).find("not UTF-8"), std::string::npos);
  EXPECT_NE(error_of("\x80\x02.").find("STOP with nothing on the stack"), std::string::npos);
  // A MARK hides what is below it, as in Python.
  EXPECT_NE(error_of("\x80\x02K\x01(0.").find("nothing on the stack"), std::string::npos);
}

// ('storage', torch.FloatStorage, key, 'cpu', numel) and _rebuild_tensor_v2 over it.
std::string tensor_pickle(const std::string& numel_op, const std::string& offset_size_stride) {
  return "\x80\x02\x63torch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storage\x63torch\nFloatStorage\n"
         "X\x01\x00\x00\x00"
         "0X\x03\x00\x00\x00"
         "cpu"s +
         numel_op + "tQ" + offset_size_stride + "\x89}tR.";
}

TEST(PickleReader, ChecksThatEveryTensorFitsItsStorage) {
  // 4 elements: offset 0, size (2, 2), stride (2, 1) fits.
  const auto fits = read(tensor_pickle("K\x04", "K\x00K\x02K\x02\x86K\x02K\x01\x86"s), PersistentIds::Zip);
  ASSERT_EQ(fits.tensors.size(), 1u);
  EXPECT_EQ(fits.tensors[0].sizes, (std::vector<std::int64_t>{2, 2}));
  EXPECT_EQ(fits.storages[0].numel, 4u);
  // Offset 1 reaches element 4 of 4.
  EXPECT_NE(error_of(tensor_pickle("K\x04", "K\x01K\x02K\x02\x86K\x02K\x01\x86"s))
                .find("reach element 4 of a storage of 4 elements"),
            std::string::npos);
  EXPECT_NE(error_of(tensor_pickle("K\x04", "K\x00K\x02\x85J\xff\xff\xff\xff\x85"s)).find("a negative stride"),
            std::string::npos);
  EXPECT_NE(error_of(tensor_pickle("K\x04", "K\x00K\x02\x85K\x01K\x01\x86"s)).find("1 sizes but 2 strides"),
            std::string::npos);
  EXPECT_NE(error_of(tensor_pickle("\x8a\x08\xff\xff\xff\xff\xff\xff\xff\x7f", "K\x00)"s)).find("a storage of"),
            std::string::npos);
  // Huge strides over a tiny storage overflow, they do not wrap around.
  EXPECT_NE(
      error_of(tensor_pickle("K\x04", "K\x00K\x03K\x03\x86\x8a\x08\0\0\0\0\0\0\0\x40\x8a\x08\0\0\0\0\0\0\0\x40\x86"s))
          .find("overflow"),
      std::string::npos);
  // A persistent id where none may be, or of the wrong shape.
  EXPECT_NE(error_of(tensor_pickle("K\x04", "K\x00)"s), PersistentIds::None)
                .find("a persistent id (a storage) where none belongs"),
            std::string::npos);
  EXPECT_NE(error_of(tensor_pickle("K\x04", "K\x00)"s), PersistentIds::Legacy).find("view)"), std::string::npos);
  EXPECT_NE(error_of("\x80\x02K\x01Q.").find("not ('storage', type, key, location, size)"), std::string::npos);
}

}  // namespace
}  // namespace ddp::detail::pickle
