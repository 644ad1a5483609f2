// Every DDP_* environment variable ddp reads, in one table, and the settings they make. They are
// read in one place, read_settings (a pure function of a variable lookup), once where they are
// used from: each process group reads them when it is made (or takes them from its options) and
// hands them to its backends; the log's level and the flight recorder, which serve the whole
// process, read them once, when the process first uses them. README's table of variables is
// checked against kSettings (tests/core/util/settings_test.cpp), as is every source file: no other
// file reads a DDP_* variable.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ddp/detail/launch_env.h"
#include "ddp/detail/log.h"

namespace ddp::detail {

// One variable: its name and what it takes, as README's table says it.
struct SettingInfo {
  std::string_view name;
  std::string_view takes;
};

inline constexpr SettingInfo kSettings[] = {
    {"DDP_LOG_LEVEL", "debug, info, warn (default), error, off"},
    {"DDP_DEBUG", "1: check before every collective that all ranks call the same one"},
    {"DDP_SHM", "0, off, false or no: ranks on one host talk through Gloo over loopback"},
    {"DDP_SHM_CHUNK_BYTES", "the shared-memory pipeline's chunk (docs/SHM.md)"},
    {"DDP_SHM_SMALL_BYTES", "the largest one-step shared-memory all_reduce (docs/SHM.md)"},
    {"DDP_SHM_STRIPE_BYTES", "the smallest all_reduce striped over every rank's lane (docs/SHM.md)"},
    {"DDP_SHM_STRIPE_CHUNK_BYTES", "the chunk of a pipelined all_reduce across hosts (docs/SHM.md)"},
    {"DDP_SHM_GATHER_CHUNK_BYTES", "the chunk of a pipelined all_gather across hosts (docs/SHM.md)"},
    {"DDP_SHM_GATHER_STRIPE_BYTES", "the smallest all_gather striped over every lane (docs/SHM.md)"},
    {"DDP_SHM_SPIN_US", "how long a wait spins before it sleeps (default 50)"},
    {"DDP_SHM_HOST_ID", "this host's identity for shared memory (tests, isolation)"},
    {"DDP_GLOO_DOUBLING_BYTES", "the largest all_reduce by recursive doubling over TCP"},
    {"DDP_SOCKET_IFNAME", "the network interface Gloo uses (or GLOO_SOCKET_IFNAME)"},
    {"DDP_FLIGHT_RECORDER", "how many operations the flight recorder keeps (default 2048, 0 off)"},
    {"DDP_FLIGHT_RECORDER_DIR", "where the flight recorder's dumps go"},
    {"DDP_JOB_ID", "the job id a store checks (or TORCHELASTIC_RUN_ID)"},
    {"DDP_STORE_PROTOCOL", "ddp or torch: the launcher's store"},
    {"DDP_TIMELINE", "path-{rank}.json: a Chrome trace of each DDP step"},
    {"DDP_BUCKET_STREAMS", "2 (default): two DDP buckets in flight where no two ranks share a host; 1: one"},
    {"DDP_STRAGGLER_REPORT", "set by ddprun: where rank 0 writes the straggler report"},
    {"DDP_CHECKPOINT_RECORD", "set by ddprun: where ranks record their checkpoints"},
};

// The shared-memory path's knobs and its small all_reduce over TCP (docs/SHM.md explains each
// and how its default was chosen).
struct ShmSettings {
  // DDP_SHM: "0", "off", "false" or "no" turn the shared-memory path off (plain gloo).
  bool enabled = true;
  // DDP_SHM_CHUNK_BYTES: the pipeline's chunk per rank per step (whole pages). At least the size of
  // a core's L2 cache: what one rank writes has then moved on to the shared L3 when the others read
  // it, which is far faster than taking it from the writer's L2 (docs/SHM.md).
  std::size_t chunk_bytes = 512u << 10;
  // DDP_SHM_SMALL_BYTES: all_reduce and reduce take one step, in which every rank reads every
  // other rank's whole buffer, when (ranks - 1) * bytes is at most this; else the two-step
  // reduce-scatter + all-gather.
  std::size_t small_bytes = 256u << 10;
  // DDP_SHM_STRIPE_BYTES: across hosts of equal sizes, an all_reduce of at least this many bytes
  // is striped over every rank's lane; a smaller one goes through the hosts' first ranks, where
  // one connection's latency, not its bandwidth, is the cost (docs/SHM.md).
  std::size_t stripe_bytes = 1u << 20;
  // DDP_SHM_STRIPE_CHUNK_BYTES: across hosts, all_reduce and broadcast are cut in chunks of this
  // size and pipelined, so that the network carries one chunk while shared memory reduces the
  // next and gathers the last (0: one chunk, unpipelined; docs/SHM.md).
  std::size_t stripe_chunk_bytes = 8u << 20;
  // DDP_SHM_GATHER_CHUNK_BYTES: across hosts, all_gather and reduce_scatter cut every rank's block
  // so that a chunk moves at most this many bytes of the whole group's data, pipelined the same
  // way (0: one chunk). Smaller than the all_reduce's: the link idles for the last chunk's
  // shared-memory gather and reordering copy, which handle all of a chunk (docs/SHM.md).
  std::size_t gather_chunk_bytes = 2u << 20;
  // DDP_SHM_GATHER_STRIPE_BYTES: across hosts of equal sizes, an all_gather (by its output) or
  // reduce_scatter (by its input) of at least this many bytes is striped over every rank's lane;
  // smaller ones, and all of them by default, go through the hosts' first ranks, which measured
  // as fast or faster at every size on emulated nodes (docs/SHM.md). For links that one stream
  // cannot fill.
  std::size_t gather_stripe_bytes = std::numeric_limits<std::int64_t>::max();
  // DDP_GLOO_DOUBLING_BYTES: over TCP (gloo: between hosts, or every rank with DDP_SHM=0), an
  // all_reduce of at most this many bytes takes recursive doubling, log2(n) rounds, instead of
  // Gloo's ring, 2(n - 1) rounds: below it a round's latency costs more than the extra bytes
  // (each round carries the whole buffer; docs/COLLECTIVES.md). The default is the crossover
  // measured at 4 nodes on 10 Gbit/s links. 0: always the ring.
  std::size_t gloo_doubling_bytes = 1u << 20;
  // DDP_SHM_SPIN_US: how long a wait spins before it sleeps on a futex (0: sleep at once).
  std::chrono::microseconds spin{50};
  // DDP_SHM_HOST_ID: replaces the detected host identity (hostname, boot id, pid namespace). Ranks
  // with different values are treated as being on different hosts: testing the hierarchical path
  // on one machine, or keeping apart ranks that must not share memory.
  std::string host_id;
  // A host's segment stays below this size; the chunk shrinks for many ranks per host.
  std::size_t max_segment_bytes = 64u << 20;
};

inline constexpr std::size_t kDefaultFlightCapacity = 2048;
inline constexpr std::size_t kMaxFlightCapacity = 100000;  // about 15 MB of dump

struct Settings {
  LogLevel log_level = LogLevel::Warn;                   // DDP_LOG_LEVEL
  bool debug = false;                                    // DDP_DEBUG
  ShmSettings shm;                                       // DDP_SHM, DDP_SHM_*, DDP_GLOO_DOUBLING_BYTES
  std::string socket_ifname;                             // DDP_SOCKET_IFNAME, else GLOO_SOCKET_IFNAME; "": by route
  std::size_t flight_capacity = kDefaultFlightCapacity;  // DDP_FLIGHT_RECORDER; 0: off
  std::string flight_dir;                                // DDP_FLIGHT_RECORDER_DIR; "": flight_config.h's default
  std::string job_id;                                    // DDP_JOB_ID, else TORCHELASTIC_RUN_ID
  std::optional<std::string> store_protocol;             // DDP_STORE_PROTOCOL (agent_store_protocol reads it)
  std::string timeline;                                  // DDP_TIMELINE
  int bucket_streams = 2;                                // DDP_BUCKET_STREAMS: 1 or 2 (the group's least holds)
  std::string straggler_report;                          // DDP_STRAGGLER_REPORT
  std::string checkpoint_record;                         // DDP_CHECKPOINT_RECORD
  // Tuning values that were out of range and fell back to their defaults, a sentence each.
  std::vector<std::string> warnings;
  // The first value that means nothing (DDP_FLIGHT_RECORDER=abc), as an error naming the variable,
  // its value and what it takes; "" when there is none. check() throws it.
  std::string invalid;

  // Throws InvalidArgument(invalid) when a value means nothing.
  void check() const;
  // Logs each warning (at Warn).
  void log_warnings() const;
};

// Reads every variable of kSettings from `env`. Never throws for a value: a tuning value out of
// range is a warning and its default, a value that means nothing is `invalid`.
Settings read_settings(const EnvLookup& env);

// The process's settings, read from its environment now (not kept: each caller reads when it
// starts using them).
Settings process_settings();

// The level of the process's log: DDP_LOG_LEVEL as the process's first log line found it, or what
// set_log_level set since. Thread-safe.
LogLevel log_level();
void set_log_level(LogLevel level);

}  // namespace ddp::detail
