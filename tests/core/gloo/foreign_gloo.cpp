// A stand-in for another Gloo in the process (an upstream LibTorch's): a library that defines
// ddp's first Gloo entry point under Gloo's own name. binding_test.cpp preloads it.
#include <cstdio>
#include <cstdlib>

extern "C" void ddp_foreign_create_device() __asm__("_ZN4gloo9transport3tcp12CreateDeviceERKNS1_4attrE");
extern "C" void ddp_foreign_create_device() {
  std::fputs("foreign_gloo: another Gloo's CreateDevice was called\n", stderr);
  std::abort();
}
