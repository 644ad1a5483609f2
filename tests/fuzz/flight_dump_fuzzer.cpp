// libFuzzer target: the flight recorder's dump reader (records/flight_dump.h), which reads files any
// process, or a damaged disk, may have written, and the analysis that runs on what it read
// (records/flight_analysis.h). Beyond "no crash, no sanitizer report, no hang": every dump that parses
// must encode to a text that parses back to the same dump, and whose encoding is the same text.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "ddp/error.h"
#include "records/flight_analysis.h"
#include "records/flight_dump.h"

namespace {

#define CHECK(condition) \
  if (!(condition)) __builtin_trap()

using namespace ddp::detail;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  FlightDump dump;
  try {
    dump = parse_dump(text, "fuzz.flight");
  } catch (const ddp::IOError& e) {
    CHECK(std::string_view(e.what()).find("flight recorder dump fuzz.flight") == 0);
    return 0;
  }
  const std::string encoded = encode(dump);
  const FlightDump again = parse_dump(encoded, "again");  // throws (an uncaught exception: a finding) if not
  CHECK(again == dump);
  CHECK(encode(again) == encoded);
  // The analysis of what was read: alone, beside a copy of itself as another rank, and as a rank
  // of another node.
  analyze({dump});
  FlightDump other = dump;
  other.rank = dump.rank == 0 ? 1 : dump.rank - 1;
  for (auto& e : other.entries) {
    if (e.state == FlightState::Started) e.state = FlightState::Finished;
  }
  analyze({dump, other});
  analyze({dump}, {other.rank});
  return 0;
}
