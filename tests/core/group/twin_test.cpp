// ProcessGroup::hosts() (how many hosts a group's ranks are on) and ProcessGroup::twin() (a
// second group of the same ranks whose operations run at the same time as the first's: DDP's
// second bucket stream where no two ranks share a host).
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "ddp/distributed.h"
#include "ddp/error.h"
#include "support/multiprocess.h"

namespace ddp {
namespace {

using namespace std::chrono_literals;

// Joins the default group with this rank on the emulated host `host` (DDP_SHM_HOST_ID).
void init_on_host(const std::string& host, bool shm = true) {
  init_process_group("gloo", {.timeout = 30s, .variables = {{"DDP_SHM_HOST_ID", host}, {"DDP_SHM", shm ? "1" : "0"}}});
}

TEST(GroupHosts, CountsTheHostsItsRanksAreOnTheSameOnEveryRank) {
  struct Case {
    std::vector<std::string> hosts;
    bool shm;
    int expected;
  };
  for (const Case& c : {Case{{"a", "a", "a"}, true, 1}, Case{{"a", "b", "c"}, true, 3}, Case{{"a", "a", "b"}, true, 2},
                        Case{{"a", "b", "a"}, false, 2}}) {
    test::run_ranks(3, [c](int rank, int) {
      init_on_host(c.hosts[static_cast<std::size_t>(rank)], c.shm);
      EXPECT_EQ(get_default_group()->hosts(), c.expected) << "DDP_SHM=" << c.shm;
      destroy_process_group();
    });
  }
  init_process_group("gloo", {.timeout = 30s});  // a group of one (no store, no peers)
  EXPECT_EQ(get_default_group()->hosts(), 1);
  destroy_process_group();
}

TEST(GroupTwin, HasTheSameRanksAndSettingsAndSequenceNumbersOfItsOwn) {
  test::run_ranks(3, [](int rank, int world) {
    init_on_host(std::string(1, static_cast<char>('a' + rank)));
    auto group = get_default_group();
    group->set_timeout(20s);
    auto twin = group->twin();
    auto second = group->twin();
    EXPECT_EQ(twin->name(), group->name() + "~1");
    EXPECT_EQ(second->name(), group->name() + "~2");
    EXPECT_EQ(twin->rank(), rank);
    EXPECT_EQ(twin->size(), world);
    EXPECT_EQ(twin->timeout(), 20s);
    EXPECT_EQ(twin->backend_name(), group->backend_name());
    EXPECT_EQ(twin->hosts(), world);
    EXPECT_EQ(twin->variables(), group->variables());
    const auto before = group->sequence_number();
    std::vector<float> data(1000, static_cast<float>(rank + 1));
    twin->all_reduce(buffer_of(data.data(), data.size()))->wait();
    EXPECT_EQ(data.front(), 6.0f);  // 1 + 2 + 3
    EXPECT_EQ(group->sequence_number(), before) << "the twin counts its own operations";
    EXPECT_EQ(twin->sequence_number(), 1u);
    twin.reset();
    second.reset();
    group->barrier()->wait();  // the group goes on after its twins are gone
    destroy_process_group();
  });
}

// DDP's buckets go over the group and its twin, so a user's set_timeout must bound both: set on
// either, it applies to the whole family, twins made later included.
TEST(GroupTwin, ASetTimeoutOnEitherAppliesToTheGroupAndAllItsTwins) {
  test::run_ranks(2, [](int rank, int) {
    init_on_host(rank == 0 ? "a" : "b");
    auto group = get_default_group();
    auto twin = group->twin();
    group->set_timeout(7s);  // an op reads its group's timeout() as it is issued
    EXPECT_EQ(twin->timeout(), 7s);
    twin->set_timeout(9s);
    EXPECT_EQ(group->timeout(), 9s);
    auto second = twin->twin();  // a twin of a twin is one of the family too
    EXPECT_EQ(second->timeout(), 9s);
    second->set_timeout(11s);
    EXPECT_EQ(group->timeout(), 11s);
    EXPECT_EQ(twin->timeout(), 11s);
    twin.reset();
    group->set_timeout(13s);  // with a member gone
    EXPECT_EQ(second->timeout(), 13s);
    second.reset();
    destroy_process_group();
  });
}

// Rank 0 starts an all_reduce on the group that rank 1 joins only after an all_reduce on the
// twin: in one queue that would wait forever (rank 0's twin op behind its group op, rank 1's group
// op behind its twin op); in two, the twin's runs while the group's waits.
TEST(GroupTwin, RunsItsOperationsWhileTheGroupsWait) {
  test::run_ranks(2, [](int rank, int) {
    init_on_host(rank == 0 ? "a" : "b");
    auto group = get_default_group();
    auto twin = group->twin();
    std::vector<float> first(4096, 1.0f), second(4096, 2.0f);
    if (rank == 0) {
      auto pending = group->all_reduce(buffer_of(first.data(), first.size()));
      twin->all_reduce(buffer_of(second.data(), second.size()))->wait();
      pending->wait();
    } else {
      twin->all_reduce(buffer_of(second.data(), second.size()))->wait();
      group->all_reduce(buffer_of(first.data(), first.size()))->wait();
    }
    EXPECT_EQ(first.back(), 2.0f);
    EXPECT_EQ(second.back(), 4.0f);
    twin.reset();
    destroy_process_group();
  });
}

}  // namespace
}  // namespace ddp
