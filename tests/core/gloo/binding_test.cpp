// Where ddp's calls into Gloo land (gloo/binding.h): the verdict on its own, this process's own
// binding, and a second Gloo preloaded into ranks that then create a group.
#include "gloo/binding.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include "ddp/distributed.h"
#include "ddp/error.h"
#include "support/expect_error.h"
#include "support/multiprocess.h"

namespace ddp::detail {
namespace {

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

const std::vector<ResolvedGlooSymbol> kInDebiansGloo = {
    {"gloo::transport::tcp::CreateDevice", "/usr/lib/libgloo.so.0"},
    {"gloo::allreduce", "/usr/lib/x86_64-linux-gnu/libgloo.so.0.5.0"},
};

TEST(GlooBinding, SystemGlooCallsLandingInLibgloo) {
  EXPECT_EQ(gloo_binding_problem(kInDebiansGloo, /*private_gloo=*/false, "/opt/train"), std::nullopt);
}

TEST(GlooBinding, ASystemGlooCallLandingInLibTorchIsNamedWithWhatToDo) {
  auto resolved = kInDebiansGloo;
  resolved.push_back({"gloo::rendezvous::Context::connectFullMesh", "/venv/torch/lib/libtorch_cpu.so"});
  const auto problem = gloo_binding_problem(resolved, false, "/opt/train");
  ASSERT_TRUE(problem.has_value());
  for (const char* part : {"resolve into /venv/torch/lib/libtorch_cpu.so (gloo::rendezvous::Context::connectFullMesh)",
                           "Debian's shared libgloo", "second Gloo", "-DCMAKE_PREFIX_PATH", "docs/GLOO.md"}) {
    EXPECT_TRUE(has(*problem, part)) << "missing '" << part << "' in: " << *problem;
  }
}

TEST(GlooBinding, PrivateGlooCallsMustLandInDdpsOwnObject) {
  const std::vector<ResolvedGlooSymbol> in_train = {{"gloo::allreduce", "/opt/train"},
                                                    {"gloo::transport::tcp::CreateDevice", "/opt/train"}};
  EXPECT_EQ(gloo_binding_problem(in_train, /*private_gloo=*/true, "/opt/train"), std::nullopt);
  // Even Debian's libgloo is the wrong one for a build with its Gloo compiled in.
  const auto problem = gloo_binding_problem(kInDebiansGloo, true, "/opt/train");
  ASSERT_TRUE(problem.has_value());
  EXPECT_TRUE(has(*problem, "resolve into /usr/lib/libgloo.so.0 (gloo::transport::tcp::CreateDevice)")) << *problem;
  EXPECT_TRUE(has(*problem, "its own private Gloo, compiled into /opt/train")) << *problem;
}

// ASan refuses to start unless its runtime comes first among the loaded libraries, so under ASan
// the preload list names that runtime (found through its entry point) before the foreign Gloo.
extern "C" void __asan_init() __attribute__((weak));

std::string preload_list(const std::string& library) {
  Dl_info info{};
  if (&__asan_init != nullptr && dladdr(reinterpret_cast<void*>(&__asan_init), &info) != 0 &&
      info.dli_fname != nullptr) {
    return std::string(info.dli_fname) + ":" + library;
  }
  return library;
}

TEST(GlooBinding, ThisProcessReachesTheGlooDdpWasBuiltWith) { EXPECT_NO_THROW(check_gloo_binding()); }

// A second Gloo loaded before ddp's: with Debian's libgloo (SYSTEM) ddp's calls would bind into
// it, so the first group says so before any call; a private Gloo (PRIVATE) cannot be reached from
// outside, and the group works.
TEST(GlooBinding, AGlooPreloadedIntoTheRanksIsNamedOrCannotReachAPrivateGloo) {
  test::RunOptions options;
  options.env = {{"LD_PRELOAD", preload_list(DDP_FOREIGN_GLOO_PATH)}, {"DDP_SHM", "0"}};
  test::run_ranks(
      2,
      [](int rank, int world) {
#ifdef DDP_GLOO_PRIVATE
    ddp::init_process_group("gloo");
    std::vector<float> data{float(rank + 1)};
    ddp::get_default_group()->all_reduce(Buffer{data.data(), data.size(), DataType::Float32})->wait();
    EXPECT_EQ(data[0], 3.0f);
    ddp::destroy_process_group();
#else
    test::expect_error<ddp::Error>(
        [] { ddp::init_process_group("gloo"); },
        {"ddp's calls into Gloo resolve into", "foreign_gloo", "gloo::transport::tcp::CreateDevice"});
#endif
      },
      options);
}

}  // namespace
}  // namespace ddp::detail
