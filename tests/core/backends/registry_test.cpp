// The backend registry (ddp/backend.h, src/core/backends/registry.h): a registration's usability
// check refuses a group with its own message, and a group of one copies with the backend's copy.
// No GPU here: the "device" backends take host memory labelled CUDA.
#include "backends/registry.h"

#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "cpu/cpu_backend.h"
#include "ddp/distributed.h"
#include "ddp/error.h"
#include "ddp/process_group.h"
#include "nccl/nccl_backend.h"
#include "support/expect_error.h"
#include "support/multiprocess.h"

namespace ddp::detail {
namespace {

using test::expect_error;

std::unique_ptr<Backend> no_backend(const BackendContext&) { throw Error("the factory is not reached in these tests"); }

bool cuda_only(const Device& d) { return d.is_cuda(); }

void register_unusable() {
  register_backend("needs_libthing", BackendRegistration{.factory = no_backend, .check_usable = [] {
                                                           throw InvalidArgument(
                                                               "needs_libthing: this build has no libthing; install "
                                                               "libthing-dev and rebuild");
                                                         }});
}

Buffer cuda_labelled(std::vector<float>& v) {
  return Buffer{v.data(), v.size(), DataType::Float32, Device{Device::Type::CUDA, 0}};
}

TEST(BackendRegistry, AnUnusableBackendIsRefusedWithItsCheckSMessage) {
  register_unusable();
  expect_error<InvalidArgument>([] { check_backend_usable("needs_libthing"); }, {"install libthing-dev"});
  expect_error<InvalidArgument>([] { ProcessGroup::create("needs_libthing", nullptr, 0, 1); },
                                {"needs_libthing: this build has no libthing", "install libthing-dev and rebuild"});
}

TEST(BackendRegistry, ThePeersOfARankThatCannotRunTheBackendHearItsCheckSMessage) {
  using namespace std::chrono_literals;
  test::run_ranks(2, [](int rank, int) {
    register_backend("unusable_on_1", BackendRegistration{.factory = make_cpu_backend, .check_usable = [rank] {
                                                            if (rank == 1)
                                                              throw InvalidArgument("install libthing-dev");
                                                          }});
    expect_error<Error>([] { init_process_group("unusable_on_1", {.timeout = 60s}); }, {"install libthing-dev"});
    EXPECT_FALSE(is_initialized());
  });
}

TEST(BackendRegistry, TheBuiltinNcclCheckSaysWhatItNeeds) {
  if (cuda_available()) GTEST_SKIP() << "this machine has a CUDA device; the gpu tests cover nccl";
#ifdef DDP_WITH_NCCL
  expect_error<Error>([] { check_backend_usable("nccl"); }, {"the nccl backend needs a CUDA device", "gloo"});
#else
  expect_error<InvalidArgument>([] { check_backend_usable("nccl"); }, {nccl_missing_message()});
#endif
}

TEST(BackendRegistry, AKeyedGroupIsRefusedWhenOneOfItsBackendsIsUnusable) {
  register_unusable();
  expect_error<InvalidArgument>([] { ProcessGroup::create("cpu:gloo,cuda:needs_libthing", nullptr, 0, 1); },
                                {"install libthing-dev and rebuild"});
}

TEST(BackendRegistry, ARegistrationWithoutAFactoryIsRefused) {
  expect_error<InvalidArgument>([] { register_backend("no_factory", BackendRegistration{}); },
                                {"register_backend(\"no_factory\")", "no factory"});
  EXPECT_FALSE(is_backend_registered("no_factory"));
}

TEST(BackendRegistry, AGroupOfOneCopiesDeviceBuffersWithTheBackendSCopy) {
  static int copies = 0;
  register_backend("counted_copy",
                   BackendRegistration{
                       .factory = no_backend, .accepts = cuda_only, .copy = [](const Buffer& from, const Buffer& to) {
                         ++copies;
                         std::copy_n(static_cast<const char*>(from.data), to.bytes(), static_cast<char*>(to.data));
                       }});
  auto group = ProcessGroup::create("cpu:gloo,cuda:counted_copy", nullptr, 0, 1);
  std::vector<float> in{1, 2}, out(2);
  group->all_gather(cuda_labelled(in), cuda_labelled(out))->wait();
  EXPECT_EQ(out, in);
  EXPECT_EQ(copies, 1);
}

TEST(BackendRegistry, AGroupOfOneRefusesDeviceBuffersItsBackendCannotCopy) {
  register_backend("no_copy", no_backend, cuda_only);
  auto group = ProcessGroup::create("cuda:no_copy", nullptr, 0, 1);
  std::vector<float> in{1, 2}, out(2);
  expect_error<Error>([&] { group->all_gather(cuda_labelled(in), cuda_labelled(out))->wait(); },
                      {"the backend registered no copy for them"});
}

}  // namespace
}  // namespace ddp::detail
