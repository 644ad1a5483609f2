// libFuzzer target: the store's wire protocols (ddp's and PyTorch's), which parse bytes from any
// process that can reach the store's port. The first input byte picks what is parsed; the rest
// is the byte stream. Beyond "no crash, no sanitizer report", every frame that parses must
// re-encode to exactly the bytes it came from and parse again to the same thing. The last mode
// feeds parsed requests to the server's key space (key_space_steps.h).
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "key_space_steps.h"
#include "store/torch_wire.h"
#include "store/wire.h"

namespace {

namespace wire = ddp::detail::wire;
namespace torch_wire = ddp::detail::torch_wire;

#define CHECK(condition) \
  if (!(condition)) __builtin_trap()

// Every complete frame in `stream`, one after another, as the server reads them.
void ddp_requests(std::string_view stream) {
  while (!stream.empty()) {
    wire::Request q;
    std::size_t consumed = 0;
    std::string error;
    auto result = wire::parse(stream, q, consumed, error);
    if (result == wire::Parse::UnknownRequest) {  // the server answers it and reads on, as here
      CHECK(!error.empty() && consumed > 0 && consumed <= stream.size());
      stream.remove_prefix(consumed);
      continue;
    }
    if (result != wire::Parse::Complete) {
      CHECK(result == wire::Parse::NeedMore || !error.empty());
      return;
    }
    CHECK(consumed > 0 && consumed <= stream.size());
    const std::string again = wire::encode(q);
    CHECK(again == stream.substr(0, consumed));
    stream.remove_prefix(consumed);
  }
}

void ddp_responses(std::string_view stream) {
  while (!stream.empty()) {
    wire::Response s;
    std::size_t consumed = 0;
    std::string error;
    auto result = wire::parse(stream, s, consumed, error);
    if (result != wire::Parse::Complete) return;
    CHECK(consumed > 0 && consumed <= stream.size());
    CHECK(wire::encode(s) == stream.substr(0, consumed));
    stream.remove_prefix(consumed);
  }
}

void torch_requests(std::string_view stream, torch_wire::Dialect dialect) {
  (void)torch_wire::classify_opening(stream);
  while (!stream.empty()) {
    torch_wire::Request q;
    std::size_t consumed = 0;
    std::string error;
    auto result = torch_wire::parse(stream, dialect, q, consumed, error);
    if (result != wire::Parse::Complete) return;
    CHECK(consumed > 0 && consumed <= stream.size());
    // Re-encoding gives a frame that parses to the same request (PyTorch's encoding is canonical
    // for what we keep, so the bytes match too).
    const std::string again = torch_wire::encode(q, dialect);
    torch_wire::Request back;
    std::size_t used = 0;
    CHECK(torch_wire::parse(again, dialect, back, used, error) == wire::Parse::Complete);
    CHECK(used == again.size() && back.query == q.query && back.key == q.key && back.value == q.value &&
          back.value2 == q.value2 && back.keys == q.keys && back.values == q.values);
    stream.remove_prefix(consumed);
  }
}

void torch_bytes(std::string_view stream) {
  std::string value, error;
  std::size_t consumed = 0;
  if (torch_wire::parse_bytes(stream, value, consumed, error) == wire::Parse::Complete) {
    CHECK(torch_wire::encode_bytes(value) == stream.substr(0, consumed));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view stream(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 6) {
    case 0: ddp_requests(stream); break;
    case 1: ddp_responses(stream); break;
    case 2: torch_requests(stream, torch_wire::Dialect::V1_13); break;
    case 3: torch_requests(stream, torch_wire::Dialect::Validated); break;
    case 4: torch_bytes(stream); break;
    case 5: ddp::fuzz::key_space_steps(stream); break;
  }
  return 0;
}
