// Parsing init_process_group's init_method URL.
#pragma once

#include <cstdint>
#include <string>

namespace ddp::detail {

struct InitMethod {
  enum class Kind { Env, Tcp, File };
  Kind kind = Kind::Env;
  std::string host;        // tcp
  std::uint16_t port = 0;  // tcp
  std::string path;        // file
};

// "env://", "tcp://host:port", "tcp://[v6addr]:port", "file:///abs/path".
// Throws InvalidArgument showing the accepted forms.
InitMethod parse_init_method(const std::string& url);

}  // namespace ddp::detail
