// Machines whose names do not resolve (containers, chroots, cloud images without /etc/hosts): a
// one-host group still forms, with every init method; a store address that does not resolve is
// said at once, not only at the timeout. The test process gets a UTS namespace of its own with a
// host name that resolves nowhere; its ranks inherit it.
#include <gtest/gtest.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "ddp/distributed.h"
#include "ddp/error.h"
#include "ddp/tcp_store.h"
#include "net/socket.h"
#include "support/expect_error.h"
#include "support/multiprocess.h"

namespace ddp {
namespace {

using namespace std::chrono_literals;

constexpr const char* kNowhere = "ddp-test-host-that-resolves-nowhere";

// Gives this process (and the ranks it starts) a host name nobody resolves. False when the
// machine does not let it (an unprivileged container): the caller skips, saying why.
bool rename_this_host(std::string& why) {
  if (::unshare(CLONE_NEWUTS) != 0) {
    why = std::string("cannot make a UTS namespace (unshare: ") + std::strerror(errno) + "); run as root";
    return false;
  }
  if (::sethostname(kNowhere, std::strlen(kNowhere)) != 0) {
    why = std::string("sethostname: ") + std::strerror(errno);
    return false;
  }
  return true;
}

#define RENAME_THIS_HOST_OR_SKIP()                                                         \
  do {                                                                                     \
    if (!test::is_rank_process()) {                                                        \
      std::string why;                                                                     \
      if (!rename_this_host(why)) GTEST_SKIP() << why;                                     \
      ASSERT_FALSE(detail::resolves(kNowhere)) << kNowhere << " resolves on this machine"; \
    }                                                                                      \
  } while (0)

void all_reduce_through_file_store(int rank, int world) {
  EXPECT_EQ(detail::local_hostname(), kNowhere);
  init_process_group("gloo", {.init_method = "file://" + std::string(std::getenv("TEST_FILE")),
                              .world_size = world,
                              .rank = rank,
                              .timeout = 30s});
  std::int64_t x = rank + 1;
  get_default_group()->all_reduce(buffer_of(&x, 1))->wait();
  EXPECT_EQ(x, world * (world + 1) / 2);
  destroy_process_group();
}

std::string temp_file() { return "/tmp/ddp-unresolvable-test-" + std::to_string(::getpid()); }

TEST(UnresolvableHostName, AOneHostGroupFormsOverFileInitWithSharedMemory) {
  RENAME_THIS_HOST_OR_SKIP();
  test::run_ranks(2, all_reduce_through_file_store, {.env = {{"TEST_FILE", temp_file()}}, .set_launch_env = false});
}

TEST(UnresolvableHostName, AOneHostGroupFormsOverFileInitWithGlooAlone) {
  RENAME_THIS_HOST_OR_SKIP();
  test::run_ranks(3, all_reduce_through_file_store,
                  {.env = {{"TEST_FILE", temp_file()}, {"DDP_SHM", "0"}}, .set_launch_env = false});
}

TEST(UnresolvableHostName, AGroupMadeWithoutAMasterAddressForms) {
  RENAME_THIS_HOST_OR_SKIP();
  test::run_ranks(
      2,
      [](int rank, int world) {
    // A store passed in by hand: no master address reaches the backend.
    auto store = std::make_shared<TCPStore>(
        TCPStoreOptions{.host = "127.0.0.1",
                        .port = static_cast<std::uint16_t>(std::atoi(std::getenv("MASTER_PORT"))),
                        .is_server = rank == 0,
                        .timeout = 30s,
                        .rank = rank});
    auto group = ProcessGroup::create("gloo", store, rank, world, {.timeout = 30s});
    float x = 1;
    group->all_reduce(buffer_of(&x, 1))->wait();
    EXPECT_EQ(x, world);
      },
      {.env = {{"DDP_SHM", "0"}}});
}

// A store client given a name that does not resolve says so in its log at once and keeps trying.
TEST(UnresolvableHostName, AStoreAddressThatDoesNotResolveIsLoggedAtOnce) {
  int out[2];
  ASSERT_EQ(::pipe(out), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::dup2(out[1], 2);
    ::close(out[0]);
    try {
      TCPStore store(TCPStoreOptions{.host = kNowhere, .port = 29999, .timeout = 60s});
    } catch (...) {
    }
    ::_exit(0);
  }
  ::close(out[1]);
  std::string log;
  const auto start = std::chrono::steady_clock::now();
  while (log.find('\n') == std::string::npos && std::chrono::steady_clock::now() - start < 10s) {
    pollfd p{out[0], POLLIN, 0};
    if (::poll(&p, 1, 100) == 1) {
      char buf[4096];
      const ssize_t n = ::read(out[0], buf, sizeof buf);
      if (n <= 0) break;
      log.append(buf, static_cast<std::size_t>(n));
    }
  }
  const auto waited = std::chrono::steady_clock::now() - start;
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  ::close(out[0]);
  for (const std::string& fragment : {std::string("cannot resolve host \"") + kNowhere + "\"", std::string("retrying"),
                                      std::string("MASTER_ADDR=127.0.0.1")}) {
    EXPECT_NE(log.find(fragment), std::string::npos) << "missing '" << fragment << "' in the log: " << log;
  }
  EXPECT_LT(waited, 10s) << "nothing was logged while the client waited (its timeout is 60 s)";
}

}  // namespace
}  // namespace ddp
