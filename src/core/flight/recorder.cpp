#include "flight/recorder.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <unordered_map>

#include "ddp/error.h"
#include "ddp/flight_recorder.h"
#include "flight/caller.h"
#include "records/flight_config.h"
#include "records/flight_dump_files.h"
#include "flight/signal_dumps.h"
#include "net/socket.h"
#include "util/log.h"

namespace ddp::detail {
namespace {

std::int64_t wall_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

FlightRecorder* g_process = nullptr;

}  // namespace

FlightRecorder& FlightRecorder::instance() {
  static std::once_flag once;  // an exception leaves it unset: the next call tries again
  std::call_once(once, [] {
    VariableProblems problems;
    const FlightSettings flight = read_variables(kFlightVariables, process_env(), problems);
    problems.check();
    g_process = new FlightRecorder(flight.capacity, flight_dir(process_env(), ::getuid(), ::getpid()),
                                   flight_job_id(process_env()));
  });
  return *g_process;
}

FlightRecorder::FlightRecorder(std::size_t capacity, std::string dir, std::string job)
    : capacity_(capacity), dir_(std::move(dir)), job_(std::move(job)), ring_(capacity) {}

std::uint32_t FlightRecorder::add_group(const std::string& name, int rank, std::vector<int> global_ranks,
                                        std::vector<BackendChoice> backends) {
  bool first = false;
  std::uint32_t index = 0;
  {
    std::lock_guard lock(mutex_);
    FlightGroup group{name, rank, static_cast<int>(global_ranks.size()), std::move(global_ranks), to_string(backends)};
    if (rank_ < 0) {
      rank_ = group.global_ranks.at(static_cast<std::size_t>(rank));
      first = true;
    }
    index = static_cast<std::uint32_t>(groups_.size());
    groups_.push_back(std::move(group));
    backends_.push_back(std::move(backends));
  }
  if (first && enabled() && this == g_process) {
    ::unlink(path().c_str());  // an earlier run's: a reader must not take it for this one's
    dump_on_signals([this](const std::string& reason) { dump(reason); });
  }
  return index;
}

FlightRecorder::Slot* FlightRecorder::find(Ticket ticket) {
  Slot& slot = ring_[(ticket.id - 1) % capacity_];
  return slot.id.load(std::memory_order_acquire) == ticket.id ? &slot : nullptr;
}

namespace {
std::int64_t steady_ns(FlightRecorder::Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}
}  // namespace

FlightRecorder::Ticket FlightRecorder::issued(std::uint32_t group, const Op& op, const void* caller) {
  if (!enabled()) return {};
  const auto now = steady_ns(Clock::now());
  const bool reduces = op.type == OpType::AllReduce || op.type == OpType::Reduce || op.type == OpType::ReduceScatter;
  const bool p2p = !op.is_collective();
  std::lock_guard lock(mutex_);
  const Ticket ticket{++recorded_};
  Slot& slot = ring_[(ticket.id - 1) % capacity_];
  slot.id.store(0, std::memory_order_relaxed);  // a late started() or ended() of the entry it held misses it
  slot.caller = caller;
  FlightEntry& e = slot.entry;
  e.group = group;
  e.seq = op.seq;
  e.op = op.type;
  e.dtype = op.agreed_dtype();
  e.count = op.input.count;
  e.out_count = op.output.count;
  e.reduce = reduces ? std::optional<ReduceOp>(op.reduce_op) : std::nullopt;
  e.root = p2p ? op.peer : op.root;
  e.tag = op.tag;
  e.issued_ns = now;
  slot.choice = choice_for(backends_[group], op);
  slot.state.store(FlightState::Issued, std::memory_order_relaxed);
  slot.started_ns.store(0, std::memory_order_relaxed);
  slot.ended_ns.store(0, std::memory_order_relaxed);
  slot.id.store(ticket.id, std::memory_order_release);
  return ticket;
}

void FlightRecorder::started(Ticket ticket, Clock::time_point when) {
  if (ticket.id == 0) return;
  if (Slot* slot = find(ticket)) {
    slot->started_ns.store(steady_ns(when), std::memory_order_relaxed);
    slot->state.store(FlightState::Started, std::memory_order_relaxed);
  }
}

void FlightRecorder::started(Ticket ticket) {
  if (ticket.id != 0) started(ticket, Clock::now());
}

void FlightRecorder::ended(Ticket ticket, bool ok) {
  if (ticket.id == 0) return;
  if (Slot* slot = find(ticket)) {
    slot->ended_ns.store(steady_ns(Clock::now()), std::memory_order_relaxed);
    slot->state.store(ok ? FlightState::Finished : FlightState::Failed, std::memory_order_relaxed);
  }
}

FlightDump FlightRecorder::snapshot(const std::string& reason) const {
  FlightDump dump;
  std::vector<const void*> callers;
  {
    std::lock_guard lock(mutex_);
    dump.rank = std::max(rank_, 0);
    dump.recorded = recorded_;
    dump.groups = groups_;
    const std::uint64_t kept = std::min<std::uint64_t>(recorded_, capacity_);
    // Steady-clock times become wall-clock ones, comparable across processes (and hosts).
    const std::int64_t to_wall = wall_ns() - steady_ns(Clock::now());
    auto wall = [&](std::int64_t t) { return t == 0 ? 0 : t + to_wall; };
    for (std::uint64_t id = recorded_ - kept + 1; id <= recorded_; ++id) {
      const Slot& slot = ring_[(id - 1) % capacity_];
      FlightEntry e = slot.entry;
      e.state = slot.state.load(std::memory_order_relaxed);
      e.issued_ns = wall(e.issued_ns);
      e.started_ns = wall(slot.started_ns.load(std::memory_order_relaxed));
      e.ended_ns = wall(slot.ended_ns.load(std::memory_order_relaxed));
      const auto& backends = backends_[e.group];
      e.backend = slot.choice < backends.size() ? backends[slot.choice].backend : groups_[e.group].backend;
      dump.entries.push_back(std::move(e));
      callers.push_back(slot.caller);
    }
  }
  std::unordered_map<const void*, std::string> names;  // a few call sites, many entries
  for (std::size_t i = 0; i < callers.size(); ++i) {
    auto it = names.find(callers[i]);
    if (it == names.end()) it = names.emplace(callers[i], caller_name(callers[i])).first;
    dump.entries[i].frame = it->second;
  }
  const auto env = process_env();
  dump.pid = ::getpid();
  dump.host = local_hostname();
  dump.job = job_;
  const auto restart = env("TORCHELASTIC_RESTART_COUNT");
  dump.restart = static_cast<int>(std::clamp<std::int64_t>(restart ? parse_int(*restart).value_or(0) : 0, 0, 1 << 30));
  dump.time_ns = wall_ns();
  dump.reason = reason;
  dump.capacity = capacity_;
  return dump;
}

std::string FlightRecorder::path() const {
  std::lock_guard lock(mutex_);
  return rank_ < 0 ? "" : flight_dump_path(dir_, rank_);
}

std::string FlightRecorder::write(const std::string& reason, const FailureRecord* failure) {
  const std::string target = path();
  if (target.empty()) {
    throw InvalidArgument(
        "flight recorder: no process group has been created yet, so there is nothing to dump (and "
        "no rank to name the dump after)");
  }
  FlightDump dump = snapshot(reason);
  if (failure) dump.failure = *failure;
  const std::string text = encode(dump);
  std::lock_guard lock(write_mutex_);  // a failure and a signal may dump at once: one temporary at a time
  write_dump_file(dir_, target, text);
  return target;
}

std::optional<std::string> FlightRecorder::dump(const std::string& reason, const FailureRecord* failure) noexcept {
  if (!enabled()) return std::nullopt;
  try {
    const std::string written = write(reason, failure);
    std::uint64_t kept;
    {
      std::lock_guard lock(mutex_);
      kept = std::min<std::uint64_t>(recorded_, capacity_);
    }
    log(LogLevel::Warn, "flight recorder: wrote this rank's last ", kept, " operations to ", written, "; `ddp-trace ",
        dir_, "` compares the ranks' dumps");
    return written;
  } catch (const std::exception& e) {
    log(LogLevel::Warn, "flight recorder: no dump was written: ", e.what());
  } catch (...) {
  }
  return std::nullopt;
}

}  // namespace ddp::detail

namespace ddp {

std::string dump_flight_recorder(const std::string& reason) {
  auto& recorder = detail::FlightRecorder::instance();
  if (!recorder.enabled()) {
    throw InvalidArgument(detail::cat("dump_flight_recorder: the flight recorder is off (",
                                      detail::kFlightRecorderVariable, "=0); set it to how many operations to keep"));
  }
  return recorder.write(reason);
}

}  // namespace ddp
