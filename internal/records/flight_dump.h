// A flight-recorder dump: what one rank wrote about its last collectives (docs/FLIGHT_RECORDER.md).
// The data, its text form (one line per entry, readable with `less`) and its reader. The reader
// takes bytes from outside: it is bounded by the input's real size, trusts no count it reads,
// and its errors name the file, the line and the fault. Pure except read_dump (the file system).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ddp/types.h"
#include "records/failure_record.h"
#include "op/op.h"

namespace ddp::detail {

// Where an operation was when the dump was taken.
enum class FlightState : std::uint8_t {
  Issued,    // called; not started yet (queued behind earlier ones)
  Started,   // running: this rank arrived and waits for, or works with, its peers
  Finished,  // done on this rank
  Failed,    // ended with an error (or never ran: the group was broken by an earlier failure)
};
std::string_view to_string(FlightState state);

// One recorded operation.
struct FlightEntry {
  std::uint32_t group = 0;  // index into FlightDump::groups
  std::uint64_t seq = 0;    // collectives: the group's sequence number; send/recv: their own counter
  OpType op = OpType::Barrier;
  DataType dtype = DataType::Float32;  // the element type the ranks must agree on
  std::uint64_t count = 0;             // input elements
  std::uint64_t out_count = 0;         // output elements
  std::optional<ReduceOp> reduce;      // ops that reduce
  std::int32_t root = -1;              // broadcast, reduce, gather, scatter: the root; send/recv: the peer
  std::uint32_t tag = 0;               // send/recv
  FlightState state = FlightState::Issued;
  // Wall-clock nanoseconds since the epoch (comparable across the ranks of one host; across hosts,
  // as far as their clocks agree); 0: not yet.
  std::int64_t issued_ns = 0;
  std::int64_t started_ns = 0;
  std::int64_t ended_ns = 0;
  std::string frame;  // who called it: "symbol+0x1f" or "module+0x4a2f1" (addr2line -Cfe module 0x4a2f1); "" unknown
  // The backend that ran it ("gloo", "nccl"; in a device-keyed group the one of its buffers'
  // device); "" unknown (a dump before version 3).
  std::string backend;

  bool operator==(const FlightEntry&) const = default;
};

// A group this process belonged to.
struct FlightGroup {
  std::string name;
  int rank = 0;  // this process's rank in the group
  int size = 1;
  std::vector<int> global_ranks;  // of each group rank
  // Its backends as get_backend() names them: "gloo", or "cpu:gloo,cuda:nccl" for a
  // device-keyed group; "" unknown (a dump before version 3).
  std::string backend;

  bool operator==(const FlightGroup&) const = default;
};

struct FlightDump {
  int rank = 0;  // global rank of the process that wrote it
  std::int64_t pid = 0;
  std::string host;
  std::string job;  // the job id (DDP_JOB_ID, TORCHELASTIC_RUN_ID); "" none
  int restart = 0;  // TORCHELASTIC_RESTART_COUNT
  std::int64_t time_ns = 0;
  std::string reason;                    // why it was written
  std::optional<FailureRecord> failure;  // the failure that wrote it, as data (records/failure_record.h)
  std::uint64_t capacity = 0;            // the most entries kept
  std::uint64_t recorded = 0;  // operations recorded since the start; the oldest recorded - entries.size() were dropped
  std::vector<FlightGroup> groups;
  std::vector<FlightEntry> entries;  // oldest first

  bool operator==(const FlightDump&) const = default;
};

// The largest dump a reader accepts (the recorder's largest capacity fits many times over).
inline constexpr std::size_t kMaxDumpBytes = 64u << 20;

// The op an entry stands for (no buffers: counts and types only), for describe() and fingerprint().
Op to_op(const FlightEntry& entry);

// The text form. parse_dump(encode(d), ...) == d for every dump.
std::string encode(const FlightDump& dump);
// Whether `group` runs its ops on more than one backend (a device-keyed spec): then its entries'
// backends are worth naming.
bool is_keyed(const FlightGroup& group);
// describe(to_op(entry)), and in a keyed group the backend that ran it: "all_reduce #3 (float32 x
// 4, SUM) over nccl".
std::string describe(const FlightEntry& entry, const FlightGroup& group);

// Throws IOError "flight recorder dump <source>: line N: <fault>" for anything but a complete
// dump of a known version (1 to 3; older ones are read with what they lack left empty):
// truncated (no "end" line), a bad number, an unknown op, a group index out of range, more than
// kMaxDumpBytes.
FlightDump parse_dump(std::string_view text, const std::string& source);
// Reads and parses the file at `path`, reading no more than its real size (and kMaxDumpBytes).
// Throws IOError naming the path: missing, unreadable, too large, or not a dump.
FlightDump read_dump(const std::string& path);

}  // namespace ddp::detail
