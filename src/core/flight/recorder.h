// The flight recorder: every process keeps its last N operations, of every group, in memory (a
// ring), and writes them to a file when something goes wrong, so that what each rank was doing
// can be compared afterwards (ddp-trace, ddprun's summary; docs/FLIGHT_RECORDER.md). Recording
// an operation costs two clock reads (three without the caller's start time), one short critical
// section and a few atomic stores; nothing is allocated.
//
// Thread-safe. The process's recorder is configured from its environment at first use (see
// records/flight_config.h); tests make their own.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "records/flight_dump.h"
#include "op/op.h"
#include "group/backend_set.h"

namespace ddp::detail {

class FlightRecorder {
 public:
  // Names one recorded operation for started() and ended(); id 0: not recorded (the recorder is
  // off). Harmless after the entry was overwritten.
  struct Ticket {
    std::uint64_t id = 0;
  };

  // The process's recorder, with the process's settings' capacity and job (DDP_FLIGHT_RECORDER,
  // DDP_JOB_ID: read once, when it is made) and flight_dir()'s folder. Its
  // first call throws InvalidArgument when DDP_FLIGHT_RECORDER is not a valid number (and later
  // calls try again). Never destroyed.
  static FlightRecorder& instance();

  // `capacity` 0: off (every call does nothing, dumps hold no entries). `dir`: where write() puts
  // the dump, named after the process's global rank (known from its first group).
  FlightRecorder(std::size_t capacity, std::string dir, std::string job = "");
  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;

  bool enabled() const { return capacity_ > 0; }
  std::size_t capacity() const { return capacity_; }

  // A group this process joined, at rank `rank` of `global_ranks.size()`, running its ops on
  // `backends` (its parsed spec; none: unknown); returns its index for issued(). Each entry of
  // the group is recorded with the backend that runs it. The first group tells the recorder the
  // process's global rank; for the process's recorder it also removes the dump an earlier run
  // left under this rank's name, makes SIGUSR1 write a dump and SIGTERM write one before it ends
  // the process (each unless the program handles that signal itself).
  std::uint32_t add_group(const std::string& name, int rank, std::vector<int> global_ranks,
                          std::vector<BackendChoice> backends = {});

  using Clock = std::chrono::steady_clock;

  // An operation was issued (its sequence number assigned) by code at `caller` (a return address).
  Ticket issued(std::uint32_t group, const Op& op, const void* caller);
  // It started to run on this rank at `when` (the caller's own clock read, when it has one). Only
  // the thread that runs the op calls started() and ended() for it.
  void started(Ticket ticket, Clock::time_point when);
  void started(Ticket ticket);  // now
  void ended(Ticket ticket, bool ok);

  // What a dump holds now (the callers resolved to names).
  FlightDump snapshot(const std::string& reason) const;

  // The file write() writes; "" until the first group is added.
  std::string path() const;

  // Writes snapshot(reason), with `failure` as data when given, to path(): a temporary file, then a
  // rename, so that a reader sees a whole dump or the previous one. Creates the folder. Returns the
  // path; throws IOError naming it.
  std::string write(const std::string& reason, const FailureRecord* failure = nullptr);

  // write() from a failure path: never throws; logs where the dump went (or why it could not be
  // written) and returns the path written, if any.
  std::optional<std::string> dump(const std::string& reason, const FailureRecord* failure = nullptr) noexcept;

 private:
  // One entry of the ring. What issued() writes is guarded by mutex_; what started() and ended()
  // write (on the thread that runs the op) are atomics, so that they take no lock. Times are
  // steady-clock nanoseconds until a snapshot turns them into wall-clock ones.
  struct Slot {
    std::atomic<std::uint64_t> id{0};  // the ticket that owns it
    const void* caller = nullptr;
    FlightEntry entry;       // the state and start/end times are in the atomics below
    std::size_t choice = 0;  // the backend: its index in the group's backends_, named at snapshot()
    std::atomic<FlightState> state{FlightState::Issued};
    std::atomic<std::int64_t> started_ns{0};
    std::atomic<std::int64_t> ended_ns{0};
  };
  Slot* find(Ticket ticket);

  const std::size_t capacity_;
  const std::string dir_;
  const std::string job_;  // the job id its dumps carry
  mutable std::mutex mutex_;
  std::mutex write_mutex_;  // one write() at a time
  std::vector<Slot> ring_;
  std::uint64_t recorded_ = 0;  // tickets handed out
  std::vector<FlightGroup> groups_;
  std::vector<std::vector<BackendChoice>> backends_;  // of each group
  int rank_ = -1;                                     // global rank, from the first group
};

}  // namespace ddp::detail
