// Where the store server records ranks whose connection closed without a goodbye, so that any
// surviving process can name the rank that was lost.
#pragma once

#include <string>
#include <vector>

namespace ddp {
class Store;
}

namespace ddp::detail {

// "__ddp/lost/<rank>": set by the TCPStore server to "pid P on HOST[: reason]".
std::string lost_rank_key(int rank);

// The ranks among `ranks` that the store records as lost, with the record text. Never throws:
// an unreachable store yields nothing (the caller's own error says enough).
std::vector<std::pair<int, std::string>> find_lost_ranks(Store& store, const std::vector<int>& ranks);

}  // namespace ddp::detail
