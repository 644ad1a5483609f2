// ProcessGroup: argument checks and sequence numbers on the caller's thread; execution, progress
// records and the "broken group" state on the group's worker thread (or an OnWait op's waiter).
#include "ddp/process_group.h"

#include <atomic>
#include <memory>

#include "backends/registry.h"
#include "ddp/error.h"
#include "ddp/hash_store.h"
#include "ddp/prefix_store.h"
#include "flight/recorder.h"
#include "group/backend_set.h"
#include "group/execute.h"
#include "group/failure.h"
#include "records/failure_record.h"
#include "group/membership.h"
#include "flight/last_words.h"
#include "op/op.h"
#include "group/progress.h"
#include "util/error_kind.h"
#include "util/log.h"
#include "util/worker.h"

namespace ddp {

using detail::cat;
using detail::ErrorKind;
using detail::FlightRecorder;
using detail::Op;
using detail::OpType;
using Clock = std::chrono::steady_clock;

// Issuing and running the group's operations. Joining is group/membership, explaining a failure
// group/failure, running one op on the backend group/execute.
struct ProcessGroup::State {
  std::string name;
  int rank = 0;
  int size = 1;
  std::vector<int> global_ranks;
  // Shared with its twins: to the user they are one group (DDP's buckets go over both), so a
  // set_timeout on any of them applies to all.
  std::shared_ptr<std::atomic<long long>> timeout_ms = std::make_shared<std::atomic<long long>>(0);
  std::shared_ptr<Store> store;      // this group's keys
  std::shared_ptr<Store> job_store;  // what `store` prefixes: twin() makes its groups there
  std::string backend_spec;          // as create() was given it
  std::string master_addr;
  std::atomic<int> twins{0};                     // made by twin() so far
  std::unique_ptr<detail::BackendSet> backends;  // one, or one per device type
  std::unique_ptr<detail::ProgressSlot> progress;
  std::shared_ptr<detail::FailureHandler> failures;  // groups of more than one
  std::uint64_t last_words = 0;                  // its note for the peers should the process end (flight/last_words)
  FlightRecorder* flight = nullptr;              // the process's flight recorder
  std::uint32_t flight_group = 0;                // this group's index in it
  std::map<std::string, std::string> variables;  // ProcessGroupOptions::variables
  bool debug = false;                            // DDP_DEBUG, read once as it was made

  std::mutex issue_mutex;  // orders sequence numbers, p2p posts and the switch to "broken"
  std::uint64_t next_seq = 0;
  std::uint64_t next_p2p = 0;
  std::exception_ptr broken;  // the first failure; every later op fails with it

  std::shared_ptr<detail::Worker> worker;      // collectives, in order (an OnWait op's waiter may run its own)
  std::unique_ptr<detail::Worker> p2p_waiter;  // waits for posted sends and receives, in order

  std::chrono::milliseconds timeout() const { return std::chrono::milliseconds(timeout_ms->load()); }

  std::shared_ptr<Work> make_work(const Op& op) {
    auto work = std::make_shared<Work>([op, group = name] { return cat(describe(op), " in group '", group, "'"); });
    if (failures) {
      work->set_timeout_explainer([this, op] { return failures->explain_stall(op); });
    }
    return work;
  }

  std::exception_ptr broken_error() {
    std::lock_guard lock(issue_mutex);
    return broken;
  }

  // Runs one collective, on the worker or on the thread of an OnWait op's waiter.
  void run(const Op& op, Work& work, FlightRecorder::Ticket ticket) {
    if (auto error = broken_error()) {
      flight->ended(ticket, false);
      return work.finish(error);
    }
    const auto started = Clock::now();
    if (progress) progress->started(op);
    flight->started(ticket, started);
    try {
      const auto deadline = started + timeout();
      Backend& backend = backends->for_op(op);
      if (debug && size > 1) {
        detail::check_agreement(backends->host() ? *backends->host() : backend, op, deadline);  // host fingerprints
      }
      if (op.agreed_count() > 0 || op.type == OpType::Barrier) detail::execute(backend, op, deadline);
      if (progress) progress->finished(op);
      flight->ended(ticket, true);
      work.finish();
    } catch (...) {
      flight->ended(ticket, false);
      work.finish(fail(op, std::current_exception(), started));
    }
  }

  // Turns a backend failure into an error that names the op and what the peers were doing; unless
  // it is the caller's mistake, marks the group broken, releases its connections, leaves the
  // failure record and writes the flight recorder's dump (at the group's first failure).
  std::exception_ptr fail(const Op& op, std::exception_ptr cause, Clock::time_point started) {
    const auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started);
    const bool released = release_on_loss(op, cause);
    const detail::FailureRecord info = failures->explain(op, cause, elapsed, timeout());
    auto failure = detail::make_error(info.kind, info.message);
    if (info.kind == ErrorKind::InvalidArgument) return failure;  // the caller's mistake: the group goes on
    const bool first = mark_broken(failure, /*release=*/!released);
    report(info, first);
    return failure;
  }

  // A lost peer: the connections go first, before the explanation reads the store, so that a
  // peer blocked on this rank (a send this rank will never receive, a ring step behind this one)
  // fails at once, and so on around the ring, instead of waiting for its timeout while this rank
  // explains. The provisional record goes before them, for those peers to name should the store's
  // record of the loss not come. (A timeout keeps its order: the peers are waiting too, and the
  // explanation must see them as they were, not as this rank's abort leaves them.) Returns whether
  // it released them.
  bool release_on_loss(const Op& op, const std::exception_ptr& cause) {
    const auto first_hand = detail::classify(cause);
    if (first_hand.kind != ErrorKind::PeerLost) return false;
    failures->record_provisional(op, first_hand);
    std::lock_guard lock(issue_mutex);
    backends->abort();
    return true;
  }

  // Every later op fails with `failure`; `release`: the connections go too. Returns whether this
  // was the group's first failure.
  bool mark_broken(const std::exception_ptr& failure, bool release) {
    std::lock_guard lock(issue_mutex);
    const bool first = !broken;
    if (first) broken = failure;
    if (release) backends->abort();
    return first;
  }

  // The final record (lets the peers and ddprun name the rank that failed first), the log, and
  // at the group's first failure the flight recorder's dump.
  void report(const detail::FailureRecord& info, bool first) {
    failures->record(info);
    detail::log(detail::LogLevel::Error, info.message);
    if (first) flight->dump(info.message, &info);
  }

  // `caller`: the return address of the public method, for the flight recorder.
  std::shared_ptr<Work> issue(Op op, Launch launch, const void* caller) {
    check_devices(op);
    detail::validate(op, rank, size);
    std::lock_guard lock(issue_mutex);
    op.seq = next_seq++;
    auto work = make_work(op);
    const auto record = flight->issued(flight_group, op, caller);
    if (broken) {
      flight->ended(record, false);
      work->finish(broken);
    } else if (size == 1) {
      run_alone(op, *work, record);
    } else {
      // Device ops stay on the worker, whose thread the backend may have bound to its GPU.
      const bool on_wait = launch == Launch::OnWait && !op.input.device.is_cuda() && !op.output.device.is_cuda();
      const auto ticket = worker->post([this, op, work, record] { run(op, *work, record); }, /*wake=*/!on_wait);
      if (on_wait) {
        work->set_starter([worker = worker, ticket](bool here) {
          if (!here || !worker->run_here(ticket)) worker->wake();
        });
      }
    }
    return work;
  }

  // A group of one runs inline: nothing to wait for.
  void run_alone(const Op& op, Work& work, FlightRecorder::Ticket record) {
    flight->started(record);
    try {
      detail::execute(backends->for_op(op), op, Clock::now() + timeout());
      flight->ended(record, true);
      work.finish();
    } catch (...) {
      flight->ended(record, false);
      work.finish(std::current_exception());
    }
  }

  std::shared_ptr<Work> issue_p2p(Op op, const void* caller) {
    check_devices(op);
    detail::validate(op, rank, size);
    std::lock_guard lock(issue_mutex);
    op.seq = next_p2p++;
    auto work = make_work(op);
    const auto record = flight->issued(flight_group, op, caller);
    if (broken) {
      flight->ended(record, false);
      work->finish(broken);
      return work;
    }
    Backend::Waiter waiter;
    try {
      Backend& backend = backends->for_op(op);
      waiter = op.type == OpType::Send ? backend.post_send(op.input, op.peer, op.tag)
                                       : backend.post_recv(op.input, op.peer, op.tag);
    } catch (...) {
      flight->ended(record, false);
      const auto cause = detail::classify(std::current_exception());
      work->finish(detail::make_error(ErrorKind::Other, cat(failures->where(op), " could not start: ", cause.message)));
      return work;
    }
    flight->started(record);  // posted: the transfer runs from here
    const auto deadline = Clock::now() + timeout();
    p2p_waiter->post([this, op, work, waiter = std::move(waiter), deadline, record] {
      try {
        waiter(deadline);
        flight->ended(record, true);
        work->finish();
      } catch (...) {
        flight->ended(record, false);
        const auto info = failures->explain_p2p(op, std::current_exception());
        if (info.kind == ErrorKind::PeerLost || info.kind == ErrorKind::Timeout) {
          failures->record(info);
          flight->dump(info.message, &info);
        }
        work->finish(detail::make_error(info.kind, info.message));
      }
    });
    return work;
  }

  void check_devices(const Op& op) const {
    for (const Buffer* b : {&op.input, &op.output}) {
      if (b->count > 0 && !backends->accepts(b->device)) {
        throw InvalidArgument(cat(to_string(op.type), ": the ", backends->name(), " backend cannot use buffers on ",
                                  to_string(b->device), detail::device_advice(backends->name(), b->device)));
      }
    }
  }
};

std::shared_ptr<ProcessGroup> ProcessGroup::create(const std::string& backend, std::shared_ptr<Store> store, int rank,
                                                   int size, ProcessGroupOptions options) {
  if (size < 1) throw InvalidArgument(cat("process group: world size must be at least 1, got ", size));
  if (rank < 0 || rank >= size) {
    throw InvalidArgument(cat("process group: rank ", rank, " is outside the world of ", size, " ranks (0 to ",
                              size - 1, "); RANK must be less than WORLD_SIZE"));
  }
  if (options.timeout <= std::chrono::milliseconds(0)) {
    throw InvalidArgument(cat("process group: the timeout must be positive, got ", options.timeout.count(), " ms"));
  }
  if (!options.global_ranks.empty() && static_cast<int>(options.global_ranks.size()) != size) {
    throw InvalidArgument(
        cat("process group: ", options.global_ranks.size(), " global ranks given for a group of ", size));
  }
  const auto choices = detail::parse_backend_spec(backend);
  for (const auto& choice : choices) {  // unknown names fail here, before any waiting
    const auto accepts = detail::accepted_devices(choice.backend);
    if (choice.device == Device::Type::CPU && !accepts(Device{})) {
      throw InvalidArgument(cat("backend ", detail::quote(backend), ": ", choice.backend,
                                " takes no CPU buffers; name "
                                "a CPU backend for cpu, e.g. \"cpu:gloo,cuda:",
                                choice.backend, "\""));
    }
  }
  auto& flight = FlightRecorder::instance();  // first: a bad DDP_FLIGHT_RECORDER fails before any waiting
  auto state = std::make_shared<State>();
  state->variables = options.variables;
  detail::VariableProblems problems;
  state->debug = detail::read_variables(detail::kDebugVariables, detail::with_overrides(options.variables), problems)
                     .check_agreement;
  problems.log_warnings();
  state->name = options.name;
  state->rank = rank;
  state->size = size;
  *state->timeout_ms = options.timeout.count();
  state->global_ranks = options.global_ranks;
  if (state->global_ranks.empty()) {
    for (int r = 0; r < size; ++r) state->global_ranks.push_back(r);
  }
  state->flight = &flight;
  state->flight_group = flight.add_group(options.name, rank, state->global_ranks, choices);
  if (!store) {
    if (size > 1) throw InvalidArgument("process group: a group of more than one rank needs a store");
    store = std::make_shared<HashStore>();
  }
  state->store = std::make_shared<PrefixStore>("pg/" + options.name, store);
  state->job_store = store;
  state->backend_spec = backend;
  state->master_addr = options.master_addr;
  std::vector<std::unique_ptr<Backend>> backends;
  // Whether this machine can run the backends (nccl: a GPU that LOCAL_RANK names): a rank that
  // cannot says so to the others as it joins, instead of leaving them to wait for it.
  std::exception_ptr unusable;
  try {
    for (const auto& choice : choices) detail::check_backend_usable(choice.backend);
  } catch (...) {
    unusable = std::current_exception();
  }
  if (size == 1) {
    if (unusable) std::rethrow_exception(unusable);
    for (const auto& choice : choices) {
      backends.push_back(detail::make_local_backend(choice.backend));
    }
    state->backends = std::make_unique<detail::BackendSet>(choices, std::move(backends));
  } else {
    // Ranks that never arrive are a failure as data too: ddprun blames them (records/failure_record.h).
    const auto missing = [&](const detail::RanksMissingError& e) {
      detail::FailureRecord record;
      record.kind = ErrorKind::Timeout;
      record.rank = state->global_ranks.at(static_cast<std::size_t>(rank));
      record.group = options.name;
      for (int r : e.ranks()) record.behind.push_back(state->global_ranks.at(static_cast<std::size_t>(r)));
      record.detail = record.message = e.what();
      detail::publish_failure(*state->store, record);
    };
    try {
      detail::await_members(*state->store, options.name, rank, size, options.timeout, unusable);
    } catch (const detail::RanksMissingError& e) {
      missing(e);
      throw;
    }
    auto diag = state->store->clone();
    diag->set_timeout(detail::kDiagnosisBudget);
    state->failures =
        std::make_shared<detail::FailureHandler>(std::move(diag), options.name, rank, state->global_ranks, choices);
    state->last_words = detail::add_last_words([failures = std::weak_ptr(state->failures)](const std::string& message) {
      if (auto f = failures.lock()) f->record(message);
    });
    for (const auto& choice : choices) {  // each device type's backend under keys of its own
      const std::string prefix = choice.device ? cat("backend/", detail::device_type_name(*choice.device)) : "backend";
      BackendContext context{std::make_shared<PrefixStore>(prefix, state->store),
                             rank,
                             size,
                             options.timeout,
                             options.master_addr,
                             state->variables};
      backends.push_back(detail::find_backend(choice.backend)(context));
    }
    state->backends = std::make_unique<detail::BackendSet>(choices, std::move(backends));
    try {
      detail::all_connected(*state->store, options.name, rank, size, options.timeout);
    } catch (const detail::RanksMissingError& e) {
      missing(e);
      throw;
    }
    auto progress_store = state->store->clone();
    progress_store->set_timeout(detail::kDiagnosisBudget);  // a stopped store host must not hold the reporter long
    state->progress = std::make_unique<detail::ProgressSlot>(std::move(progress_store), rank);
    state->worker = std::make_shared<detail::Worker>("ddp-" + options.name);
    state->p2p_waiter = std::make_unique<detail::Worker>("ddp-p2p-" + options.name);
  }
  return std::shared_ptr<ProcessGroup>(new ProcessGroup(std::move(state)));
}

ProcessGroup::ProcessGroup(std::shared_ptr<State> state) : state_(std::move(state)) {}

ProcessGroup::~ProcessGroup() {
  if (state_->last_words) detail::remove_last_words(state_->last_words);
  // Runs what is queued (each op bounded by the timeout) and waits for an op a caller runs, then
  // joins; a Work waited for later finds its op done.
  if (state_->worker) state_->worker->stop();
  state_->worker.reset();
  state_->p2p_waiter.reset();
  state_->progress.reset();
}

int ProcessGroup::rank() const { return state_->rank; }
int ProcessGroup::size() const { return state_->size; }
const std::string& ProcessGroup::name() const { return state_->name; }
std::string_view ProcessGroup::backend_name() const { return state_->backends->name(); }
bool ProcessGroup::accepts(const Device& device) const { return state_->backends->accepts(device); }
std::chrono::milliseconds ProcessGroup::timeout() const { return state_->timeout(); }

const std::map<std::string, std::string>& ProcessGroup::variables() const { return state_->variables; }

int ProcessGroup::hosts() const {
  if (state_->size == 1) return 1;
  const Backend* host = state_->backends->host();
  return host ? host->hosts() : 0;
}

std::shared_ptr<ProcessGroup> ProcessGroup::twin() {
  const int n = ++state_->twins;
  ProcessGroupOptions options{.timeout = timeout(),
                              .name = cat(state_->name, "~", n),
                              .global_ranks = state_->global_ranks,
                              .master_addr = state_->master_addr,
                              .variables = state_->variables};
  auto twin = create(state_->backend_spec, state_->job_store, state_->rank, state_->size, std::move(options));
  twin->state_->timeout_ms = state_->timeout_ms;  // no op has been issued on it yet
  return twin;
}

std::shared_ptr<void> ProcessGroup::allocate_shared_memory(std::size_t bytes) {
  if (bytes == 0) throw InvalidArgument("allocate_shared_memory: the size is 0; ask for at least one byte");
  return state_->backends->allocate_shared(bytes);
}

void ProcessGroup::set_timeout(std::chrono::milliseconds timeout) {
  if (timeout <= std::chrono::milliseconds(0)) {
    throw InvalidArgument(cat("set_timeout: the timeout must be positive, got ", timeout.count(), " ms"));
  }
  *state_->timeout_ms = timeout.count();
}

int ProcessGroup::global_rank(int rank) const {
  if (rank < 0 || rank >= state_->size) {
    throw InvalidArgument(
        cat("global_rank: ", rank, " is not a rank of group '", state_->name, "' (0 to ", state_->size - 1, ")"));
  }
  return state_->global_ranks[rank];
}

std::uint64_t ProcessGroup::sequence_number() const {
  std::lock_guard lock(state_->issue_mutex);
  return state_->next_seq;
}

std::shared_ptr<Work> ProcessGroup::all_reduce(Buffer data, ReduceOp op, Launch launch) {
  return state_->issue({.type = OpType::AllReduce, .input = data, .output = data, .reduce_op = op}, launch,
                       __builtin_return_address(0));
}

std::shared_ptr<Work> ProcessGroup::broadcast(Buffer data, int root, Launch launch) {
  return state_->issue({.type = OpType::Broadcast, .input = data, .output = data, .root = root}, launch,
                       __builtin_return_address(0));
}

std::shared_ptr<Work> ProcessGroup::reduce(Buffer data, int root, ReduceOp op, Launch launch) {
  return state_->issue({.type = OpType::Reduce, .input = data, .output = data, .reduce_op = op, .root = root}, launch,
                       __builtin_return_address(0));
}

std::shared_ptr<Work> ProcessGroup::all_gather(Buffer input, Buffer output, Launch launch) {
  return state_->issue({.type = OpType::AllGather, .input = input, .output = output}, launch,
                       __builtin_return_address(0));
}

std::shared_ptr<Work> ProcessGroup::gather(Buffer input, Buffer output, int root, Launch launch) {
  return state_->issue({.type = OpType::Gather, .input = input, .output = output, .root = root}, launch,
                       __builtin_return_address(0));
}

std::shared_ptr<Work> ProcessGroup::scatter(Buffer input, Buffer output, int root, Launch launch) {
  return state_->issue({.type = OpType::Scatter, .input = input, .output = output, .root = root}, launch,
                       __builtin_return_address(0));
}

std::shared_ptr<Work> ProcessGroup::reduce_scatter(Buffer input, Buffer output, ReduceOp op, Launch launch) {
  return state_->issue({.type = OpType::ReduceScatter, .input = input, .output = output, .reduce_op = op}, launch,
                       __builtin_return_address(0));
}

std::shared_ptr<Work> ProcessGroup::all_to_all(Buffer input, Buffer output, Launch launch) {
  return state_->issue({.type = OpType::AllToAll, .input = input, .output = output}, launch,
                       __builtin_return_address(0));
}

std::shared_ptr<Work> ProcessGroup::barrier(Launch launch) {
  return state_->issue({.type = OpType::Barrier}, launch, __builtin_return_address(0));
}

std::shared_ptr<Work> ProcessGroup::send(Buffer data, int dst, std::uint32_t tag) {
  return state_->issue_p2p({.type = OpType::Send, .input = data, .output = data, .peer = dst, .tag = tag},
                           __builtin_return_address(0));
}

std::shared_ptr<Work> ProcessGroup::recv(Buffer data, int src, std::uint32_t tag) {
  return state_->issue_p2p({.type = OpType::Recv, .input = data, .output = data, .peer = src, .tag = tag},
                           __builtin_return_address(0));
}

}  // namespace ddp
