// libFuzzer target: the safetensors reader (Hugging Face's format: a header length, a JSON
// header, the data), for files from anywhere. Beyond "no crash, no sanitizer report, no error
// but ddp::Error", every file that reads must write and read back to the same tensors.
#include <cstdint>
#include <string_view>

#include "ddp/error.h"
#include "state_dict/safetensors_file.h"
#include "weights_round_trip.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    ddp::fuzz::check_round_trip(ddp::detail::weights::read_safetensors(bytes));
  } catch (const ddp::Error&) {
    // A refusal, with its reason.
  }
  return 0;
}
