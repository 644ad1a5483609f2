#include "shm/tuning.h"

namespace ddp::detail::shm {

void read_chunk_bytes(Tuning& t, std::string_view name, const std::string& value, VariableProblems& problems) {
  if (auto v = integer_in(name, value, 4096, 64 << 20, problems)) {
    t.chunk_bytes = (static_cast<std::size_t>(*v) + 4095) / 4096 * 4096;  // whole pages
  }
}

}  // namespace ddp::detail::shm
