#include "init/init_method.h"

#include "ddp/error.h"
#include "util/strings.h"

namespace ddp::detail {
namespace {

[[noreturn]] void bad(const std::string& url, const std::string& why) {
  throw InvalidArgument(cat("init_method ", quote(url), ": ", why,
                            ". Use \"env://\" (MASTER_ADDR/MASTER_PORT), \"tcp://host:port\" or \"file:///path\"."));
}

}  // namespace

InitMethod parse_init_method(const std::string& url) {
  InitMethod m;
  if (url.empty() || url == "env://") return m;
  if (url.rfind("tcp://", 0) == 0) {
    m.kind = InitMethod::Kind::Tcp;
    std::string rest = url.substr(6);
    std::string port_text;
    if (!rest.empty() && rest.front() == '[') {
      auto close = rest.find(']');
      if (close == std::string::npos || close + 1 >= rest.size() || rest[close + 1] != ':')
        bad(url, "an IPv6 address needs the form [addr]:port");
      m.host = rest.substr(1, close - 1);
      port_text = rest.substr(close + 2);
    } else {
      auto colon = rest.rfind(':');
      if (colon == std::string::npos) bad(url, "no port");
      m.host = rest.substr(0, colon);
      port_text = rest.substr(colon + 1);
    }
    if (m.host.empty()) bad(url, "no host");
    auto port = parse_int(port_text);
    if (!port || *port < 1 || *port > 65535)
      bad(url, cat("the port ", quote(port_text), " is not a number from 1 to 65535"));
    m.port = static_cast<std::uint16_t>(*port);
    return m;
  }
  if (url.rfind("file://", 0) == 0) {
    m.kind = InitMethod::Kind::File;
    m.path = url.substr(7);
    if (m.path.empty() || m.path.front() != '/') bad(url, "the path must be absolute (file:///tmp/rendezvous)");
    return m;
  }
  bad(url, "unknown scheme");
}

}  // namespace ddp::detail
