// The dump's text form and its reader: every dump reads back as it was, and every damaged or
// foreign input is an IOError that names the file and the fault.
#include "records/flight_dump.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ddp/error.h"
#include "util/strings.h"
#include "support/expect_error.h"
#include "support/launch.h"

namespace ddp::detail {
namespace {

using test::expect_error;

FlightDump sample() {
  FlightDump d;
  d.rank = 1;
  d.pid = 4242;
  d.host = "node 3";  // a space: escaped
  d.job = "";         // empty: "-"
  d.restart = 2;
  d.time_ns = 1'764'000'000'123'456'789;
  d.reason = "all_reduce #21 (float32 x 1000, SUM) in group 'world' on rank 1 timed out after 5.0 s\nnext line 100%";
  d.failure = FailureRecord{.kind = ErrorKind::Timeout,
                            .rank = 1,
                            .group = "world",
                            .op = "all_reduce #21 (float32 x 1000, SUM)",
                            .seq = 21,
                            .behind = {2},
                            .detail = "Ranks that had not reached all_reduce #21",
                            .message = d.reason};
  d.capacity = 4;
  d.recorded = 7;
  d.groups = {{"world", 1, 3, {0, 1, 2}, "cpu:gloo,cuda:nccl"}, {"-", 0, 2, {1, 2}, "gloo"}};
  FlightEntry a;
  a.op = OpType::AllReduce;
  a.seq = 20;
  a.count = a.out_count = 1000;
  a.reduce = ReduceOp::SUM;
  a.state = FlightState::Finished;
  a.issued_ns = 10;
  a.started_ns = 11;
  a.ended_ns = 12;
  a.frame = "ddp::torch::all_reduce+0x1f";
  a.backend = "nccl";
  FlightEntry b;
  b.group = 1;
  b.op = OpType::Recv;
  b.seq = 3;
  b.dtype = DataType::Int64;
  b.count = b.out_count = 5;
  b.root = 0;
  b.tag = 7;
  b.state = FlightState::Started;
  b.issued_ns = 13;
  b.started_ns = 13;
  b.backend = "gloo";
  FlightEntry c;
  c.op = OpType::Scatter;
  c.seq = 21;
  c.dtype = DataType::BFloat16;
  c.count = 0;
  c.out_count = 8;
  c.root = 2;
  c.state = FlightState::Issued;
  c.issued_ns = 14;
  d.entries = {a, b, c};
  return d;
}

TEST(FlightDump, ReadsBackExactlyWhatWasWritten) {
  const FlightDump d = sample();
  const std::string text = encode(d);
  EXPECT_EQ(parse_dump(text, "x"), d) << text;
  EXPECT_NE(text.find("host node%203\n"), std::string::npos) << text;
  EXPECT_NE(text.find("job -\n"), std::string::npos) << text;
  EXPECT_NE(text.find("group %2D 0 2 1,2 gloo\n"), std::string::npos) << text;
  EXPECT_NE(
      text.find("\nall_reduce 0 20 float32 1000 1000 SUM -1 0 finished 10 11 12 ddp::torch::all_reduce+0x1f nccl\n"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find(" 0 - -\nend\n"), std::string::npos) << "no caller, no backend known: - -\n" << text;
  EXPECT_EQ(text.substr(text.size() - 4), "end\n");
  EXPECT_EQ(describe(to_op(d.entries[1])), "recv #3 (int64 x 5, from rank 0, tag 7)");
  EXPECT_EQ(describe(to_op(d.entries[2])), "scatter #21 (bfloat16 x 8, root 2)");
  // The backend is named where the group has several.
  EXPECT_EQ(describe(d.entries[0], d.groups[0]), "all_reduce #20 (float32 x 1000, SUM) over nccl");
  EXPECT_EQ(describe(d.entries[1], d.groups[1]), "recv #3 (int64 x 5, from rank 0, tag 7)");
  EXPECT_EQ(describe(d.entries[2], d.groups[0]), "scatter #21 (bfloat16 x 8, root 2)") << "unknown: not named";
  FlightDump empty;
  EXPECT_EQ(parse_dump(encode(empty), "empty"), empty);
  EXPECT_NE(encode(empty).find("\nfailure -\n"), std::string::npos) << "no failure wrote it";
}

// The sample as an older ddp wrote it: no backends (before 3), no failure line (before 2).
std::string older(int version) {
  const std::string whole = encode(sample());
  std::string text;
  bool entry = false;
  for (std::size_t start = 0, end; (end = whole.find('\n', start)) != std::string::npos; start = end + 1) {
    std::string line = whole.substr(start, end - start);
    if (line == "end") entry = false;
    if (line.rfind("ddp-flight-recorder ", 0) == 0) line = cat("ddp-flight-recorder ", version);
    if (line.rfind("group ", 0) == 0 || entry) line.erase(line.rfind(' '));  // the backend
    if (line.rfind("failure ", 0) == 0 && version < 2) continue;
    if (line.rfind("entries ", 0) == 0) entry = true;
    text += line + "\n";
  }
  return text;
}

TEST(FlightDump, OlderDumpsReadAsBeforeWithoutWhatTheyLack) {
  FlightDump d = sample();
  for (auto& g : d.groups) g.backend.clear();
  for (auto& e : d.entries) e.backend.clear();
  EXPECT_EQ(parse_dump(older(2), "v2"), d) << older(2);
  d.failure.reset();
  EXPECT_EQ(parse_dump(older(1), "v1"), d) << older(1);
  EXPECT_EQ(describe(d.entries[0], d.groups[0]), "all_reduce #20 (float32 x 1000, SUM)");
  expect_error<IOError>([] { parse_dump(older(2).replace(0, 21, "ddp-flight-recorder 3"), "x"); },
                        {"\"group\" takes 5 values, found 4"});
}

// Replaces the first `from` in the sample's text with `to`.
std::string damaged(const std::string& from, const std::string& to) {
  std::string text = encode(sample());
  const auto at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return text.replace(at, from.size(), to);
}

TEST(FlightDump, EveryFaultIsAnIOErrorNamingTheFileLineAndFault) {
  const std::string source = "/logs/rank_1.flight";
  auto fails = [&](const std::string& text, std::initializer_list<std::string> fragments) {
    SCOPED_TRACE(text.substr(0, 200));
    auto message = expect_error<IOError>([&] { parse_dump(text, source); }, fragments);
    EXPECT_NE(message.find("flight recorder dump /logs/rank_1.flight"), std::string::npos) << message;
  };
  const std::string whole = encode(sample());
  fails("", {"truncated after line 0"});
  fails("PK\x03\x04 a zip file\n", {"line 1", "not a flight recorder dump", "PK"});
  fails(damaged("ddp-flight-recorder 3", "ddp-flight-recorder 9"), {"line 1", "version 9", "reads versions 1 to 3"});
  fails(damaged("ddp-flight-recorder 3", "ddp-flight-recorder 0"), {"line 1", "version 0", "reads versions 1 to 3"});
  fails(whole.substr(0, whole.size() - 4), {"truncated after line 18", "\"end\"", "died while writing"});
  fails(whole.substr(0, whole.size() - 1), {"line 19", "the line has no end"});
  fails(whole.substr(0, whole.find("all_reduce 0 20")), {"truncated after line 15", "an entry"});
  fails(whole + "more\n", {"text after the \"end\" line"});
  fails(damaged("rank 1\n", "rank one\n"), {"line 2", "the rank is \"one\", not a number"});
  fails(damaged("kind%20timeout", "kind%20slow"), {"line 9", "failure record: unknown kind \"slow\""});
  fails(damaged("\nfailure ", "\nfailures "), {"line 9", "expected \"failure\", found \"failures\""});
  fails(damaged("rank 1\n", "rank -1\n"), {"line 2", "the rank is -1, outside 0 to"});
  fails(damaged("pid 4242\n", "pid  4242\n"), {"line 3", "an empty field"});
  fails(damaged("pid 4242\n", "pid 4242 7\n"), {"line 3", "\"pid\" takes 1 value, found 2"});
  fails(damaged("host ", "hostname "), {"line 4", "expected \"host\", found \"hostname\""});
  fails(damaged("node%203", "node%2"), {"line 4", "bad escape"});
  fails(damaged("node%203", "node%G03"), {"bad escape"});
  fails(damaged("entries 3", "entries 8"), {"8 entries but only 7 recorded"});
  fails(damaged("entries 3", "entries 5"), {"an entry"});
  fails(damaged("groups 2", "groups 3"), {"expected \"group\", found \"entries\""});
  fails(damaged("groups 2", "groups 18446744073709551615"), {"expected \"group\""});
  fails(damaged("groups 2", "groups 18446744073709551616"), {"not a number in range"});
  fails(damaged("group world 1 3 0,1,2", "group world 3 3 0,1,2"), {"the group rank is 3, outside 0 to 2"});
  fails(damaged("group world 1 3 0,1,2", "group world 1 3 0,1"), {"2 global ranks for a group of 3"});
  fails(damaged("group world 1 3 0,1,2", "group world 1 3 0,1,2,3"), {"more global ranks than the group's 3"});
  fails(damaged("group world 1 3 0,1,2", "group world 1 3 0,,2"), {"a global rank is \"\""});
  fails(damaged("group world 1 3 0,1,2", "group world 1 0 -"), {"the group's size is 0"});
  fails(damaged("all_reduce 0 20", "all_reduce 2 20"), {"line 16", "group index 2 but the dump lists 2 groups"});
  fails(damaged("all_reduce 0 20", "all_gossip 0 20"), {"unknown operation \"all_gossip\""});
  fails(damaged("float32 1000", "float33 1000"), {"unknown element type \"float33\""});
  fails(damaged(" SUM -1", " SUMMA -1"), {"unknown reduction \"SUMMA\""});
  fails(damaged("finished", "done"), {"unknown state \"done\""});
  fails(damaged(" 1000 1000 ", " 1000 "), {"an entry has 15 fields, found 14"});
  fails(damaged("all_reduce+0x1f nccl", "all_reduce+0x1f nccl extra"), {"line 16", "an entry has 15 fields, found 16"});
  fails(damaged("all_reduce+0x1f nccl", "all_reduce+0x1f nc%Zl"), {"line 16", "the backend has a bad escape"});
  fails(damaged("0,1,2 cpu:gloo,cuda:nccl", "0,1,2 cpu:gloo%"), {"line 13", "the group's backend has a bad escape"});
  fails(damaged(" 1000 1000 ", " 1000 -1000 "), {"the output element count is \"-1000\""});
  fails(damaged("finished 10", "finished -10"), {"the issue time is -10, outside 0"});
  // Larger than any dump: refused before it is looked at.
  const std::string huge(kMaxDumpBytes + 1, 'x');
  fails(huge, {"67108865 bytes, more than the 67108864"});
}

TEST(FlightDump, ReadingAFileIsBoundedByItsSizeAndNamesIt) {
  test::TempDir dir;
  const std::string path = dir.file("rank_1.flight");
  test::write_file(path, encode(sample()));
  EXPECT_EQ(read_dump(path), sample());
  expect_error<IOError>([&] { read_dump(dir.file("rank_9.flight")); },
                        {"flight recorder dump ", "rank_9.flight: cannot open it: No such file or directory"});
  expect_error<IOError>([&] { read_dump(dir.path()); }, {dir.path(), "a folder, not a file"});
  const std::string fifo = dir.file("fifo.flight");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_error<IOError>([&] { read_dump(fifo); }, {"fifo.flight: not a regular file"});  // and no hang
  // A sparse file past the limit: refused by its size, without reading it.
  const std::string big = dir.file("big.flight");
  test::write_file(big, "");
  ASSERT_EQ(::truncate(big.c_str(), static_cast<off_t>(kMaxDumpBytes) + 1), 0);
  expect_error<IOError>([&] { read_dump(big); }, {"big.flight: 67108865 bytes, more than the"});
  // Half a dump: what a process killed while writing would leave, were it not for the rename.
  const std::string text = encode(sample());
  test::write_file(path, text.substr(0, text.size() / 2));
  expect_error<IOError>([&] { read_dump(path); }, {path, "line"});
}

}  // namespace
}  // namespace ddp::detail
