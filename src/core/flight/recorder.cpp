#include "flight/recorder.h"

#include <cxxabi.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <unordered_map>

#include "ddp/error.h"
#include "ddp/flight_recorder.h"
#include "flight/config.h"
#include "net/socket.h"
#include "util/log.h"

namespace ddp::detail {
namespace {

std::int64_t wall_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

std::string hex(std::uintptr_t value) {
  char text[24];
  std::snprintf(text, sizeof text, "0x%zx", static_cast<std::size_t>(value));
  return text;
}

std::string program_path() {
  char path[4096];
  const ssize_t n = ::readlink("/proc/self/exe", path, sizeof path - 1);
  return n > 0 ? std::string(path, static_cast<std::size_t>(n)) : "?";
}

// "symbol+0x1f" when the caller's symbol is exported, else "module+0x4a2f1" (a file offset for
// addr2line -Cfe module). The return address points after the call: the call is at pc - 1.
std::string caller_name(const void* pc) {
  if (!pc) return "";
  const auto at = reinterpret_cast<std::uintptr_t>(pc) - 1;
  Dl_info info{};
  if (::dladdr(reinterpret_cast<const void*>(at), &info) == 0) return hex(at);
  if (info.dli_sname && info.dli_saddr) {
    int status = 0;
    char* demangled = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
    std::string name = status == 0 && demangled ? demangled : info.dli_sname;
    std::free(demangled);
    if (auto paren = name.find('('); paren != std::string::npos) name.resize(paren);  // the arguments: long, and known
    return name + "+" + hex(at - reinterpret_cast<std::uintptr_t>(info.dli_saddr));
  }
  std::string module = info.dli_fname ? info.dli_fname : "?";
  if (module.rfind("/proc/", 0) == 0 || module.empty()) module = program_path();  // started as /proc/self/exe
  if (auto slash = module.rfind('/'); slash != std::string::npos) module.erase(0, slash + 1);
  return module + "+" + hex(at - reinterpret_cast<std::uintptr_t>(info.dli_fbase));
}

// mkdir -p. Throws IOError naming the folder that could not be made.
void make_folders(const std::string& path) {
  for (std::size_t pos = 1; pos <= path.size(); ++pos) {
    if (pos < path.size() && path[pos] != '/') continue;
    const std::string partial = path.substr(0, pos);
    if (::mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) {
      throw IOError(cat("flight recorder: cannot create the folder ", partial, " for the dump: ", std::strerror(errno),
                        ". Set ", kFlightDirVariable, " to a folder this process may write to"));
    }
  }
}

void write_file(const std::string& path, const std::string& text) {
  const std::string temp = cat(path, ".tmp", ::getpid());
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw IOError(cat("flight recorder: cannot create ", temp, ": ", std::strerror(errno)));
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int error = n < 0 ? errno : ENOSPC;
      ::close(fd);
      ::unlink(temp.c_str());
      throw IOError(cat("flight recorder: cannot write ", temp, ": ", std::strerror(error)));
    }
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int error = errno;
    ::unlink(temp.c_str());
    throw IOError(cat("flight recorder: cannot rename ", temp, " to ", path, ": ", std::strerror(error)));
  }
}

// Signals. A handler only writes the signal's number to a pipe (about all a handler may do); a
// thread waiting on the pipe writes the dump. SIGUSR1 asks for a dump. SIGTERM (what ddprun,
// torchrun, Slurm and Kubernetes send to stop a worker, as when another worker failed) gets the
// dump first: its handler waits for the thread's answer, for a second at most (the thread may
// need a lock the interrupted thread holds), then ends the process as SIGTERM would have.
int g_signals[2] = {-1, -1};  // handler -> dump thread: the signal's number
int g_written[2] = {-1, -1};  // dump thread -> SIGTERM's handler: done

void on_signal(int sig) {
  const int saved = errno;
  const char byte = static_cast<char>(sig);
  [[maybe_unused]] auto n = ::write(g_signals[1], &byte, 1);
  if (sig == SIGTERM) {
    pollfd answer{g_written[0], POLLIN, 0};
    ::poll(&answer, 1, 1000);
    ::raise(SIGTERM);  // SA_RESETHAND made it the default again: it ends the process once this returns
  }
  errno = saved;
}

bool is_default(int sig) {
  struct sigaction old {};
  return ::sigaction(sig, nullptr, &old) == 0 && !(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_DFL;
}

// Leaves a program's own handlers alone: only signals at their default (which ends the process)
// are taken.
void dump_on_signals(FlightRecorder& recorder) {
  const bool usr1 = is_default(SIGUSR1), term = is_default(SIGTERM);
  if (!usr1 && !term) return;
  if (::pipe2(g_signals, O_CLOEXEC) != 0 || ::pipe2(g_written, O_CLOEXEC) != 0) return;
  // A burst of signals fills the pipe at worst: a handler must never block on it.
  ::fcntl(g_signals[1], F_SETFL, ::fcntl(g_signals[1], F_GETFL) | O_NONBLOCK);
  // The thread starts with the two signals blocked (never its to handle: SIGTERM's handler would
  // wait there for itself).
  sigset_t both, before;
  sigemptyset(&both);
  sigaddset(&both, SIGUSR1);
  sigaddset(&both, SIGTERM);
  ::pthread_sigmask(SIG_BLOCK, &both, &before);
  std::thread([&recorder] {
    for (;;) {
      char sig;
      const ssize_t n = ::read(g_signals[0], &sig, 1);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;
      if (sig == SIGTERM) {
        recorder.dump("SIGTERM: the process was told to stop (by ddprun when another worker failed, by a scheduler, "
                      "or by kill)");
        const char done = 1;
        [[maybe_unused]] auto w = ::write(g_written[1], &done, 1);
      } else {
        recorder.dump("SIGUSR1: a dump was asked for (kill -USR1)");
      }
    }
  }).detach();
  ::pthread_sigmask(SIG_SETMASK, &before, nullptr);
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  if (usr1) ::sigaction(SIGUSR1, &action, nullptr);
  action.sa_flags = SA_RESTART | SA_RESETHAND;
  if (term) ::sigaction(SIGTERM, &action, nullptr);
}

FlightRecorder* g_process = nullptr;

}  // namespace

FlightRecorder& FlightRecorder::instance() {
  static std::once_flag once;  // an exception leaves it unset: the next call tries again
  std::call_once(once, [] {
    const auto env = process_env();
    g_process = new FlightRecorder(flight_capacity(env), flight_dir(env, ::getuid(), ::getpid()));
  });
  return *g_process;
}

FlightRecorder::FlightRecorder(std::size_t capacity, std::string dir)
    : capacity_(capacity), dir_(std::move(dir)), ring_(capacity) {}

std::uint32_t FlightRecorder::add_group(const std::string& name, int rank, std::vector<int> global_ranks) {
  bool first = false;
  std::uint32_t index = 0;
  {
    std::lock_guard lock(mutex_);
    FlightGroup group{name, rank, static_cast<int>(global_ranks.size()), std::move(global_ranks)};
    if (rank_ < 0) {
      rank_ = group.global_ranks.at(static_cast<std::size_t>(rank));
      first = true;
    }
    index = static_cast<std::uint32_t>(groups_.size());
    groups_.push_back(std::move(group));
  }
  if (first && enabled() && this == g_process) {
    ::unlink(path().c_str());  // an earlier run's: a reader must not take it for this one's
    dump_on_signals(*this);
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
  dump.job = flight_job(env);
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
    throw InvalidArgument("flight recorder: no process group has been created yet, so there is nothing to dump (and "
                          "no rank to name the dump after)");
  }
  FlightDump dump = snapshot(reason);
  if (failure) dump.failure = *failure;
  const std::string text = encode(dump);
  std::lock_guard lock(write_mutex_);  // a failure and a signal may dump at once: one temporary at a time
  make_folders(dir_);
  write_file(target, text);
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
