// libFuzzer target: the readers of PyTorch's torch.save format, which parse files from anywhere
// (a colleague's checkpoint, a download). The first input byte picks what is read: a pickle as
// the zip format's data.pkl, a pickle as the legacy format's, or a whole file (zip or legacy,
// through the same detection as load_state_dict). Beyond "no crash, no sanitizer report, no
// error but ddp::Error", every file that reads must write and read back to the same tensors.
#include <cstdint>
#include <string_view>

#include "ddp/error.h"
#include "state_dict/pickle_reader.h"
#include "state_dict/weights_file.h"
#include "weights_round_trip.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace pickle = ddp::detail::pickle;
  if (size == 0) return 0;
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    switch (data[0] % 3) {
      case 0: pickle::read(bytes, pickle::PersistentIds::Zip); break;
      case 1: pickle::read(bytes, pickle::PersistentIds::Legacy); break;
      case 2: ddp::fuzz::check_round_trip(ddp::detail::weights::read_weights(bytes, "")); break;
    }
  } catch (const ddp::Error&) {
    // A refusal, with its reason: what a hostile file should get.
  }
  return 0;
}
