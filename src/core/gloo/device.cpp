#include "gloo/device.h"

#include <gloo/transport/tcp/device.h>

#include <csignal>
#include <cstdlib>
#include <map>
#include <mutex>

#include "ddp/error.h"
#include "gloo/binding.h"
#include "gloo/termination.h"
#include "net/socket.h"
#include "util/strings.h"

namespace ddp::detail {
namespace {

// The address or interface Gloo listens on (see make_gloo_backend).
gloo::transport::tcp::attr device_attr(const std::string& master_addr, const std::string& ifname,
                                       const GlooPlacement& placement) {
  gloo::transport::tcp::attr attr;
  if (!ifname.empty()) {
    attr.iface = ifname;
    return attr;
  }
  if (!master_addr.empty()) {
    if (is_loopback_host(master_addr)) {
      attr.hostname = "127.0.0.1";
      return attr;
    }
    attr.hostname = local_address_toward(master_addr);
    if (!attr.hostname.empty()) return attr;
  }
  if (placement.one_network) {
    attr.hostname = "127.0.0.1";
    return attr;
  }
  attr.hostname = local_hostname();
  if (!resolves(attr.hostname)) {
    throw IOError(cat("gloo cannot choose an address to listen on: this host's name ", quote(attr.hostname),
                      " does not resolve (no /etc/hosts entry or DNS record), and the ranks are not all in one "
                      "network namespace",
                      master_addr.empty()
                          ? std::string(" and no master address is known (file:// init)")
                          : cat(" and the master address ", quote(master_addr), " does not resolve either"),
                      ". Set GLOO_SOCKET_IFNAME to the interface that reaches the other hosts (see `ip addr`), or "
                      "add this host's name to /etc/hosts."));
  }
  return attr;
}

// Gloo writes to its sockets with writev, which raises SIGPIPE once a peer has died; by default
// that kills this process before its error can name the dead peer (ranks died of signal 13 in
// CI). So SIGPIPE is ignored, as Python does at startup, unless the program has its own handler.
void ignore_sigpipe() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current {};
    if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) ::signal(SIGPIPE, SIG_IGN);
  });
}

}  // namespace

// One device (one I/O thread) per interface, shared by every group of the process.
std::shared_ptr<gloo::transport::Device> shared_device(const std::string& master_addr, const std::string& ifname,
                                                       const GlooPlacement& placement) {
  check_gloo_binding();  // before any call could land in another process-wide Gloo
  ignore_sigpipe();
  explain_gloo_terminations();  // the one thread of each device: an exception there ends the process
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<gloo::transport::Device>> devices;
  auto attr = device_attr(master_addr, ifname, placement);
  const std::string key = attr.iface.empty() ? "host:" + attr.hostname : "iface:" + attr.iface;
  std::lock_guard lock(mutex);
  auto& device = devices[key];
  if (!device) {
    try {
      device = gloo::transport::tcp::CreateDevice(attr);
    } catch (const std::exception& e) {
      throw IOError(cat("gloo cannot open a socket on ",
                        attr.iface.empty() ? "address " + attr.hostname : "interface " + attr.iface, ": ", e.what(),
                        ". Name the interface that reaches the other hosts with GLOO_SOCKET_IFNAME (see `ip addr`)."));
    }
  }
  return device;
}

}  // namespace ddp::detail
