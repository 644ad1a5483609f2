// A failure as data (records/failure_record.h): its text form, where it is kept, and the records
// real ranks leave when a peer stops or never joins.
#include "records/failure_record.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <thread>

#include "ddp/distributed.h"
#include "ddp/error.h"
#include "ddp/hash_store.h"
#include "ddp/prefix_store.h"
#include "ddp/tcp_store.h"
#include "support/expect_error.h"
#include "support/multiprocess.h"

namespace ddp::detail {
namespace {

using namespace std::chrono_literals;
using test::expect_error;

FailureRecord full() {
  return FailureRecord{.kind = ErrorKind::PeerLost,
                       .rank = 12,
                       .group = "world",
                       .op = "all_reduce #39 (float32 x 1, SUM)",
                       .seq = 39,
                       .lost = {3},
                       .behind = {1, 7},
                       .inside = {2},
                       .mismatched = {5, 6},
                       .first = 3,
                       .detail = "Lost rank 3 (pid 77 on a: reset)\nsecond line \\n not an escape",
                       .message = "all_reduce #39 failed: Lost rank 3\n"};
}

TEST(FailureRecords, SurviveTheirTextForm) {
  EXPECT_EQ(decode_failure_record(encode(full())), full());
  EXPECT_EQ(decode_failure_record(encode(FailureRecord{})), FailureRecord{});
  for (auto kind : {ErrorKind::InvalidArgument, ErrorKind::Timeout, ErrorKind::PeerLost, ErrorKind::Mismatch,
                    ErrorKind::IO, ErrorKind::Other}) {
    FailureRecord r = full();
    r.kind = kind;
    EXPECT_EQ(decode_failure_record(encode(r)).kind, kind);
  }
}

TEST(FailureRecords, KeepTheirStateAndReadVersionOneAsFinal) {
  FailureRecord provisional = full();
  provisional.state = FailureState::Provisional;
  EXPECT_EQ(decode_failure_record(encode(provisional)), provisional);
  // What flight dumps written before the state field carry.
  std::string old = encode(full());
  old.replace(old.find("ddp-failure 2"), 13, "ddp-failure 1");
  old.erase(old.find("state final\n"), 12);
  EXPECT_EQ(decode_failure_record(old), full());
}

TEST(FailureRecords, AnythingElseIsAnErrorNamingTheFault) {
  const std::string good = encode(full());
  const auto replaced = [&](const std::string& from, const std::string& to) {
    std::string text = good;
    text.replace(text.find(from), from.size(), to);
    return text;
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "failure record: truncated"},
      {"ddp-failure 3\nkind other\n", "failure record: starts with \"ddp-failure 3\""},
      {"ddp-failure 3\n", "not \"ddp-failure 2\" (or \"ddp-failure 1\")"},
      {replaced("state final", "state maybe"), "unknown state \"maybe\""},
      {replaced("state final\n", ""), "expected field state, found \"rank 12\""},
      {good.substr(0, good.size() - 1), "truncated"},
      {good + "extra\n", "text after its last field"},
      {replaced("kind peer_lost", "kind crashed"), "unknown kind \"crashed\""},
      {replaced("rank 12", "rank twelve"), "field rank is not a number"},
      {replaced("behind 1,7", "behind 1,"), "field behind ends in a comma"},
      {replaced("lost 3", "lost -3"), "field lost holds rank -3"},
      {replaced("seq 39", "sequence 39"), "expected field seq"},
      {replaced("detail Lost", "detail \\xLost"), "unknown escape \\x"},
  };
  for (const auto& [text, fault] : cases) {
    expect_error<IOError>([&] { decode_failure_record(text); }, {fault});
  }
}

TEST(FailureRecords, NameTheRanksWaitedForOnceEachLostFirst) {
  EXPECT_EQ(waited_for(full()), (std::vector<int>{3, 1, 7, 2}));
  FailureRecord twice;
  twice.lost = {4};
  twice.behind = {4, 2};
  EXPECT_EQ(waited_for(twice), (std::vector<int>{4, 2}));
  EXPECT_TRUE(waited_for(FailureRecord{.mismatched = {1}}).empty()) << "a mismatch has no one culprit";
}

TEST(FailureRecords, TheFirstOfAProcessStaysUnderEveryPrefixAndCanBeCleared) {
  auto root = std::make_shared<HashStore>();
  PrefixStore group("ddp/0/0/pg/world", std::make_shared<PrefixStore>("outer", root));
  FailureRecord first = full();
  publish_failure(group, first);
  EXPECT_TRUE(root->check({failure_record_key(12)})) << "kept unprefixed, where ddprun looks";
  FailureRecord later = full();
  later.message = "a later failure of the same process";
  publish_failure(*root, later);
  EXPECT_EQ(read_failure(group, 12), first);
  EXPECT_EQ(read_failure(*root, 12), first);
  EXPECT_FALSE(read_failure(*root, 13));
  root->set(failure_record_key(13), "not a record");
  EXPECT_FALSE(read_failure(*root, 13)) << "a malformed record is none";
  clear_failure(group, 12);
  EXPECT_FALSE(read_failure(*root, 12));
}

// One record from the first moment: a provisional one is hidden from ddprun's reads, replaced by
// the final one, and never replaces a final one.
TEST(FailureRecords, AFinalRecordReplacesTheProvisionalOneAndStays) {
  auto root = std::make_shared<HashStore>();
  PrefixStore group("ddp/0/0/pg/world", root);
  FailureRecord note = full();
  note.state = FailureState::Provisional;
  note.message = "first-hand: connection reset";
  publish_failure(group, note);
  EXPECT_FALSE(read_failure(group, 12)) << "ddprun reads final records only";
  EXPECT_EQ(read_failure(group, 12, /*provisional=*/true), note);
  FailureRecord later_note = note;
  later_note.message = "a second provisional note";
  publish_failure(group, later_note);
  EXPECT_EQ(read_failure(group, 12, true), note) << "the first note stays until the final record";
  publish_failure(group, full());
  EXPECT_EQ(read_failure(group, 12), full());
  publish_failure(group, note);
  EXPECT_EQ(read_failure(group, 12, true), full()) << "a provisional record never replaces a final one";
}

// The record the failing rank's own store (rank 0 hosts it) holds for global rank `rank`.
std::optional<FailureRecord> record_in_job_store(int rank) {
  TCPStore store(TCPStoreOptions{.host = std::getenv("MASTER_ADDR"),
                                 .port = static_cast<std::uint16_t>(std::stoi(std::getenv("MASTER_PORT"))),
                                 .timeout = 5s});
  return read_failure(store, rank);
}

TEST(FailureRecords, ARankThatTimesOutOnAStoppedPeerRecordsItAsBehind) {
  const std::string pid_file = "/tmp/ddp-test-" + std::to_string(::getpid()) + "-record-stopped-pid";
  test::run_ranks(
      2,
      [&](int rank, int) {
    init_process_group("gloo", {.timeout = 2s});
    auto group = get_default_group();
    float x = 1;
    group->all_reduce(buffer_of(&x, 1))->wait();
    if (rank == 1) {
      test::stop_this_rank();
      return;
    }
    const std::string message =
        expect_error<TimeoutError>([&] { group->all_reduce(buffer_of(&x, 1))->wait(); }, {"all_reduce #1"});
    const auto record = record_in_job_store(0);  // the group's store, hosted by this rank
    if (const int pid = test::stopped_rank_pid(); pid > 0) ::kill(pid, SIGKILL);
    ASSERT_TRUE(record);
    EXPECT_EQ(record->kind, ErrorKind::Timeout);
    EXPECT_EQ(record->rank, 0);
    EXPECT_EQ(record->group, "world");
    EXPECT_EQ(record->op, "all_reduce #1 (float32 x 1, SUM)");
    EXPECT_EQ(record->seq, 1);
    EXPECT_EQ(record->behind, std::vector<int>{1});
    EXPECT_TRUE(record->lost.empty());
    EXPECT_EQ(record->message, message) << "the record's text is the error's";
    EXPECT_NE(record->detail.find("Ranks that had not reached all_reduce #1"), std::string::npos) << record->detail;
      },
      {.env = {{"PID_FILE", pid_file}}, .killed = {1}});
  if (!test::is_rank_process()) ::unlink(pid_file.c_str());
}

TEST(FailureRecords, ARankThatNeverJoinsIsRecordedAsBehind) {
  test::run_ranks(3, [&](int rank, int) {
    if (rank == 2) return;  // never joins
    // A store of the test's own, which outlives the failed init_process_group.
    const auto port = static_cast<std::uint16_t>(std::stoi(std::getenv("MASTER_PORT")));
    auto store = std::make_shared<TCPStore>(
        TCPStoreOptions{.host = std::getenv("MASTER_ADDR"), .port = port, .is_server = rank == 0, .timeout = 10s});
    const std::string message = expect_error<TimeoutError>(
        [&] { init_process_group("gloo", {.timeout = 1s, .store = store}); }, {"rank 2 of 3 did not join within"});
    if (rank == 1) return;
    store->wait({failure_record_key(1)}, 10s);  // rank 1 failed too, and left its record
    for (int r : {0, 1}) {
      const auto record = read_failure(*store, r);
      ASSERT_TRUE(record) << "rank " << r;
      EXPECT_EQ(record->kind, ErrorKind::Timeout);
      EXPECT_EQ(record->rank, r);
      EXPECT_EQ(record->group, "world");
      EXPECT_EQ(record->op, "");
      EXPECT_EQ(record->behind, std::vector<int>{2});
    }
    EXPECT_NE(message.find(read_failure(*store, 0)->message), std::string::npos) << message;
  });
}

}  // namespace
}  // namespace ddp::detail
