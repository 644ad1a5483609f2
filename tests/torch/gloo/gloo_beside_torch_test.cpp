// ddp's Gloo and LibTorch's in one process (docs/GLOO.md). This binary also runs the gloo
// collective suite (core/group/gloo_collectives_test.cpp) and links LibTorch: against an upstream
// LibTorch, which carries a Gloo of its own, every collective runs beside that copy.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <memory>
#include <string>

#include "ddp/distributed.h"
#include "gloo/binding.h"
#include "support/multiprocess.h"

namespace ddp {
namespace {

std::string object_of(const void* address) {
  Dl_info info{};
  return address && ::dladdr(address, &info) && info.dli_fname ? info.dli_fname : "(none)";
}

bool ends_with_library(const std::string& path, const std::string& stem) {
  const auto slash = path.rfind('/');
  return path.compare(slash == std::string::npos ? 0 : slash + 1, stem.size(), stem) == 0;
}

// What LibTorch's own calls to Gloo bind to: the process's global lookup of Gloo's symbol.
const void* global_create_device() {
  return ::dlsym(RTLD_DEFAULT, "_ZN4gloo9transport3tcp12CreateDeviceERKNS1_4attrE");
}

TEST(GlooBesideTorch, DdpReachesItsGloo) { EXPECT_NO_THROW(detail::check_gloo_binding()); }

TEST(GlooBesideTorch, LibTorchsGlooCallsBindToTheGlooLibTorchLinks) {
  torch::ones({2}).sum();  // LibTorch is loaded and used
  const void* global = global_create_device();
  ASSERT_NE(global, nullptr) << "this LibTorch reaches no Gloo";
  // LibTorch's Gloo: inside libtorch_cpu (an upstream LibTorch) or Debian's libgloo, which
  // Debian's LibTorch links; never ddp's.
  const auto library = object_of(global);
  EXPECT_TRUE(ends_with_library(library, "libtorch_cpu.so") || ends_with_library(library, "libgloo.so")) << library;
#ifdef DDP_GLOO_PRIVATE
  // ddp's copy is in a namespace of its own (ddp_gloo), and hidden: not even that name is exported.
  EXPECT_EQ(::dlsym(RTLD_DEFAULT, "_ZN8ddp_gloo9transport3tcp12CreateDeviceERKNS1_4attrE"), nullptr);
#endif
}

// LibTorch's own Gloo at work in a process whose ddp collectives run over ddp's: a device from
// c10d::ProcessGroupGloo (no header: the wheel ships none of Gloo's), opened and closed, between
// all_reduces over TCP. A call bound into the other Gloo would read its attributes with the
// wrong layout.
TEST(GlooBesideTorch, LibTorchsGlooDeviceOpensBetweenDdpCollectives) {
  test::RunOptions options;
  options.env = {{"DDP_SHM", "0"}};
  test::run_ranks(
      2,
      [](int rank, int) {
    init_process_group("gloo");
    std::vector<float> x{float(rank + 1)};
    get_default_group()->all_reduce(buffer_of(x.data(), x.size()))->wait();
    EXPECT_EQ(x[0], 3.0f);
    // c10d::ProcessGroupGloo::createDeviceForInterface(const std::string&[, bool lazy_init]): the
    // result is a std::shared_ptr<gloo::transport::Device>, whose layout is any shared_ptr's.
    using Create2 = std::shared_ptr<void> (*)(const std::string&, bool);
    using Create1 = std::shared_ptr<void> (*)(const std::string&);
    const char* with_lazy =
        "_ZN4c10d16ProcessGroupGloo24createDeviceForInterfaceERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEEb";
    const char* without =
        "_ZN4c10d16ProcessGroupGloo24createDeviceForInterfaceERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE";
    std::shared_ptr<void> device;
    if (void* f = ::dlsym(RTLD_DEFAULT, with_lazy)) {
      device = reinterpret_cast<Create2>(f)("lo", false);
    } else if (void* g = ::dlsym(RTLD_DEFAULT, without)) {
      device = reinterpret_cast<Create1>(g)("lo");
    } else {
      GTEST_SKIP() << "this LibTorch has no c10d::ProcessGroupGloo::createDeviceForInterface";
    }
    EXPECT_NE(device, nullptr);
    device.reset();
    get_default_group()->all_reduce(buffer_of(x.data(), x.size()))->wait();
    EXPECT_EQ(x[0], 6.0f);
    destroy_process_group();
      },
      options);
}

}  // namespace
}  // namespace ddp
