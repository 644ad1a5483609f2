// ProcessGroup: argument checks and sequence numbers on the caller's thread; execution, progress
// records, failure diagnosis and the "broken group" state on the group's worker thread.
#include "ddp/process_group.h"

#include <unistd.h>

#include <atomic>
#include <thread>

#include "backend_registry.h"
#include "ddp/error.h"
#include "ddp/hash_store.h"
#include "ddp/prefix_store.h"
#include "group/diagnosis.h"
#include "group/execute.h"
#include "group/local_backend.h"
#include "group/op.h"
#include "group/progress.h"
#include "group/sync_issue.h"
#include "group/worker.h"
#include "store/lost_ranks.h"
#include "net/socket.h"
#include "util/log.h"

namespace ddp {

using detail::cat;
using detail::Op;
using detail::OpType;
using Clock = std::chrono::steady_clock;

namespace {

// How long a failing rank looks for lost-rank records, which may trail the socket error by a moment.
constexpr auto kLostRecordGrace = std::chrono::milliseconds(1500);
// What reading the peers' records may cost when explaining a failure.
constexpr auto kDiagnosisBudget = std::chrono::seconds(5);

std::string failed_key(int rank) { return "failed/" + std::to_string(rank); }

// The store the TCPStore server writes lost-rank records to: under every PrefixStore.
std::shared_ptr<Store> root_of(std::shared_ptr<Store> store) {
  while (auto prefixed = std::dynamic_pointer_cast<PrefixStore>(store)) store = prefixed->underlying();
  return store;
}

std::string identity() { return cat("pid ", ::getpid(), " on ", detail::local_hostname()); }

enum class Category { Timeout, PeerLost, Mismatch, Argument, Other };

Category categorize(const std::exception_ptr& error, std::string& message) {
  try {
    std::rethrow_exception(error);
  } catch (const TimeoutError& e) {
    message = e.what();
    return Category::Timeout;
  } catch (const PeerLostError& e) {
    message = e.what();
    return Category::PeerLost;
  } catch (const MismatchError& e) {
    message = e.what();
    return Category::Mismatch;
  } catch (const InvalidArgument& e) {
    message = e.what();
    return Category::Argument;
  } catch (const std::exception& e) {
    message = e.what();
  } catch (...) {
    message = "an unknown exception";
  }
  return Category::Other;
}

std::exception_ptr make_error(Category category, const std::string& message) {
  switch (category) {
    case Category::Timeout: return std::make_exception_ptr(TimeoutError(message));
    case Category::PeerLost: return std::make_exception_ptr(PeerLostError(message));
    case Category::Mismatch: return std::make_exception_ptr(MismatchError(message));
    case Category::Argument: return std::make_exception_ptr(InvalidArgument(message));
    case Category::Other: break;
  }
  return std::make_exception_ptr(Error(message));
}

}  // namespace

struct ProcessGroup::State {
  std::string name;
  std::string backend_name;
  int rank = 0;
  int size = 1;
  std::vector<int> global_ranks;
  std::atomic<long long> timeout_ms{0};
  std::shared_ptr<Store> store;  // this group's keys
  std::shared_ptr<Store> diag;   // the same keys on a connection of its own with a short timeout,
                                 // for reading the peers' records when something went wrong
  std::shared_ptr<Store> diag_root;  // where lost-rank records are, on that connection
  std::unique_ptr<Backend> backend;
  std::unique_ptr<detail::ProgressSlot> progress;

  std::mutex issue_mutex;  // orders sequence numbers, p2p posts and the switch to "broken"
  std::uint64_t next_seq = 0;
  std::uint64_t next_p2p = 0;
  std::exception_ptr broken;  // the first failure; every later op fails with it

  std::shared_ptr<detail::Worker> worker;      // collectives, in order (issue_and_wait's caller runs its own)
  std::unique_ptr<detail::Worker> p2p_waiter;  // waits for posted sends and receives, in order

  std::chrono::milliseconds timeout() const { return std::chrono::milliseconds(timeout_ms.load()); }

  std::string where(const Op& op) const {
    return cat(describe(op), " in group '", name, "' on rank ", rank);
  }

  std::shared_ptr<Work> make_work(const Op& op) {
    auto work = std::make_shared<Work>(cat(describe(op), " in group '", name, "'"));
    if (size > 1) {
      // Explains a caller's wait(timeout) that ran out: read what the peers recorded.
      work->set_timeout_explainer([this, op] {
        auto peers = detail::read_peer_states(*diag, *diag_root, rank, global_ranks, kDiagnosisBudget);
        return detail::diagnose(op, rank, peers).text;
      });
    }
    return work;
  }

  std::exception_ptr broken_error() {
    std::lock_guard lock(issue_mutex);
    return broken;
  }

  // Runs one collective on the worker thread.
  void run(const Op& op, Work& work) {
    if (auto error = broken_error()) return work.finish(error);
    const auto started = Clock::now();
    if (progress) progress->started(op);
    try {
      const auto deadline = started + timeout();
      if (detail::debug_checks_enabled() && size > 1) detail::check_agreement(*backend, op, deadline);
      if (op.agreed_count() > 0 || op.type == OpType::Barrier) detail::execute(*backend, op, deadline);
      if (progress) progress->finished(op);
      work.finish();
    } catch (...) {
      work.finish(fail(op, std::current_exception(), started));
    }
  }

  // Turns a backend failure into an error that names the op and what the peers were doing, marks
  // the group broken and releases its connections.
  std::exception_ptr fail(const Op& op, std::exception_ptr error, Clock::time_point started) {
    std::string cause;
    Category category = categorize(error, cause);
    detail::Diagnosis diagnosis;
    if (size > 1 && category != Category::Argument && category != Category::Mismatch) diagnosis = diagnose(op, category);
    if (diagnosis.kind == detail::Diagnosis::Kind::Lost) category = Category::PeerLost;
    if (diagnosis.kind == detail::Diagnosis::Kind::Mismatch) category = Category::Mismatch;
    const auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started);
    std::string message =
        category == Category::Timeout
            ? cat(where(op), " timed out after ", detail::format_duration(elapsed), " (the group's timeout is ",
                  detail::format_duration(timeout()), ")")
            : cat(where(op), " failed after ", detail::format_duration(elapsed));
    message += cat(": ", cause);
    if (!diagnosis.text.empty()) message += cat(". ", diagnosis.text);
    auto failure = make_error(category, message);
    if (category != Category::Argument) {
      {
        std::lock_guard lock(issue_mutex);
        if (!broken) broken = failure;
        backend->abort();
      }
      try {
        diag->set(failed_key(rank), message);  // lets the peers name the rank that failed first
      } catch (...) {
      }
      detail::log(detail::LogLevel::Error, message);
    }
    return failure;
  }

  detail::Diagnosis diagnose(const Op& op, Category category) {
    const auto until = Clock::now() + (category == Category::PeerLost ? kLostRecordGrace : std::chrono::milliseconds(0));
    for (;;) {
      auto peers = detail::read_peer_states(*diag, *diag_root, rank, global_ranks, kDiagnosisBudget);
      auto diagnosis = detail::diagnose(op, rank, peers);
      if (diagnosis.kind == detail::Diagnosis::Kind::Lost || diagnosis.kind == detail::Diagnosis::Kind::Mismatch) {
        return diagnosis;
      }
      if (!peers.store_error.empty()) return diagnosis;
      if (auto first = first_failure()) return {detail::Diagnosis::Kind::Behind, *first};
      if (Clock::now() >= until) return diagnosis;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }

  // What another rank of the group reported when it failed, if one did.
  std::optional<std::string> first_failure() {
    try {
      for (int r = 0; r < size; ++r) {
        if (r != rank && diag->check({failed_key(r)})) {
          return cat("Rank ", r, " failed first: ", diag->get(failed_key(r)));
        }
      }
    } catch (...) {
    }
    return std::nullopt;
  }

  std::shared_ptr<Work> issue(Op op) {
    check_devices(op);
    detail::validate(op, rank, size);
    std::lock_guard lock(issue_mutex);
    op.seq = next_seq++;
    auto work = make_work(op);
    if (broken) {
      work->finish(broken);
    } else if (size == 1) {
      run_alone(op, *work);
    } else {
      // A host op its caller waits for at once (issue_and_wait) is posted without waking the
      // worker: the caller runs it. Device ops stay on the worker, whose thread the backend may
      // have bound to its GPU.
      auto* sync = op.input.device.is_cuda() || op.output.device.is_cuda() ? nullptr : detail::SyncIssue::claim();
      const auto ticket = worker->post([this, op, work] { run(op, *work); }, /*wake=*/sync == nullptr);
      if (sync) sync->posted(worker, ticket);
    }
    return work;
  }

  // A group of one runs inline: nothing to wait for.
  void run_alone(const Op& op, Work& work) {
    try {
      detail::execute(*backend, op, Clock::now() + timeout());
      work.finish();
    } catch (...) {
      work.finish(std::current_exception());
    }
  }

  std::shared_ptr<Work> issue_p2p(Op op) {
    check_devices(op);
    detail::validate(op, rank, size);
    std::lock_guard lock(issue_mutex);
    op.seq = next_p2p++;
    auto work = make_work(op);
    if (broken) {
      work->finish(broken);
      return work;
    }
    Backend::Waiter waiter;
    try {
      waiter = op.type == OpType::Send ? backend->post_send(op.input, op.peer, op.tag)
                                       : backend->post_recv(op.input, op.peer, op.tag);
    } catch (...) {
      work->finish(make_error(Category::Other, cat(where(op), " could not start: ", describe_current())));
      return work;
    }
    const auto deadline = Clock::now() + timeout();
    p2p_waiter->post([this, op, work, waiter = std::move(waiter), deadline] {
      try {
        waiter(deadline);
        work->finish();
      } catch (...) {
        std::string cause;
        Category category = categorize(std::current_exception(), cause);
        auto lost = detail::find_lost_ranks(*diag_root, {global_ranks[op.peer]});
        std::string message = cat(where(op), " failed: ", cause);
        if (!lost.empty()) {
          category = Category::PeerLost;
          message += cat(". Rank ", op.peer, " was lost (", lost.front().second, ")");
        }
        work->finish(make_error(category, message));
      }
    });
    return work;
  }

  static std::string describe_current() {
    std::string message;
    categorize(std::current_exception(), message);
    return message;
  }

  void check_devices(const Op& op) const {
    for (const Buffer* b : {&op.input, &op.output}) {
      if (b->count > 0 && !backend->accepts(b->device)) {
        throw InvalidArgument(cat(to_string(op.type), ": the ", backend_name, " backend cannot use buffers on ",
                                  to_string(b->device),
                                  b->device.is_cuda()
                                      ? "; the nccl backend takes CUDA buffers on this rank's GPU (the one LOCAL_RANK "
                                        "names), gloo takes CPU buffers"
                                      : "; use the gloo backend for CPU tensors"));
      }
    }
  }

  // Every rank claims its rank, checks the world size, and waits for the others. A rank that
  // finds a conflict records it under "join_error" so that every waiting rank fails with it too.
  void join() {
    const std::string me = identity();
    store->add("claims", 1);
    const std::string owner = store->compare_set(cat("rank/", rank, "/owner"), "", me);
    if (owner != me) {
      join_failed(cat("two processes claim rank ", rank, " of group '", name, "': ", owner, " and ", me,
                      ". Each process needs its own RANK (check the launcher or the RANK variable)."));
    }
    const std::string claimed = store->compare_set("size", "", cat(size, " (said by rank ", rank, ", ", me, ")"));
    if (detail::parse_int(claimed.substr(0, claimed.find(' '))).value_or(-1) != size) {
      join_failed(cat("ranks disagree on the size of group '", name, "': rank ", rank, " (", me, ") has world size ",
                      size, ", but the size is ", claimed, ". Start every process with the same WORLD_SIZE."));
    }
    store->set(cat("joined/", rank), me);
    std::vector<std::string> keys;
    for (int r = 0; r < size; ++r) keys.push_back(cat("joined/", r));
    const auto start = Clock::now();
    const auto deadline = start + timeout();
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      try {
        store->wait(keys, std::clamp(left, std::chrono::milliseconds(1), std::chrono::milliseconds(500)));
        return;
      } catch (const TimeoutError&) {
      }
      if (store->check({"join_error"})) leave_with(store->get("join_error"));
      if (Clock::now() >= deadline) break;
    }
    std::vector<int> missing;
    for (int r = 0; r < size; ++r) {
      if (!store->check({cat("joined/", r)})) missing.push_back(r);
    }
    throw TimeoutError(cat("group '", name, "': rank", missing.size() == 1 ? " " : "s ", detail::join(missing),
                           " of ", size, " did not join within ",
                           detail::format_duration(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start)),
                           ". They may not have been started, may have crashed before joining, or may be using another "
                           "MASTER_ADDR/MASTER_PORT or WORLD_SIZE."));
  }

  [[noreturn]] void join_failed(const std::string& message) {
    // The first conflict found is the one every rank reports.
    leave_with(store->compare_set("join_error", "", message));
  }

  // Before failing, wait (briefly) until every rank that came has seen the error: the rank that
  // hosts the store must not take it down while the others are still looking.
  [[noreturn]] void leave_with(const std::string& message) {
    try {
      store->add("join_error_seen", 1);
      const auto until = Clock::now() + std::chrono::seconds(3);
      while (store->add("join_error_seen", 0) < store->add("claims", 0) && Clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    } catch (...) {
    }
    throw MismatchError(message);
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
    throw InvalidArgument(cat("process group: ", options.global_ranks.size(), " global ranks given for a group of ", size));
  }
  auto factory = detail::find_backend(backend);
  auto state = std::make_shared<State>();
  state->name = options.name;
  state->backend_name = backend;
  state->rank = rank;
  state->size = size;
  state->timeout_ms = options.timeout.count();
  state->global_ranks = options.global_ranks;
  if (state->global_ranks.empty()) {
    for (int r = 0; r < size; ++r) state->global_ranks.push_back(r);
  }
  if (!store) {
    if (size > 1) throw InvalidArgument("process group: a group of more than one rank needs a store");
    store = std::make_shared<HashStore>();
  }
  state->store = std::make_shared<PrefixStore>("pg/" + options.name, store);
  if (size == 1) {
    state->backend = detail::make_local_backend(backend);
  } else {
    state->join();
    state->diag = state->store->clone();
    state->diag->set_timeout(kDiagnosisBudget);
    state->diag_root = root_of(state->diag);
    BackendContext context{std::make_shared<PrefixStore>("backend", state->store), rank, size, options.timeout,
                           options.master_addr};
    state->backend = factory(context);
    auto progress_store = state->store->clone();
    progress_store->set_timeout(kDiagnosisBudget);  // a stopped store host must not hold the reporter long
    state->progress = std::make_unique<detail::ProgressSlot>(std::move(progress_store), rank);
    state->worker = std::make_shared<detail::Worker>("ddp-" + options.name);
    // Sends and receives are always posted with a wake-up: no idle check needed.
    state->p2p_waiter = std::make_unique<detail::Worker>("ddp-p2p-" + options.name, std::chrono::hours(1));
  }
  return std::shared_ptr<ProcessGroup>(new ProcessGroup(std::move(state)));
}

ProcessGroup::ProcessGroup(std::shared_ptr<State> state) : state_(std::move(state)) {}

ProcessGroup::~ProcessGroup() {
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
std::string_view ProcessGroup::backend_name() const { return state_->backend_name; }
std::chrono::milliseconds ProcessGroup::timeout() const { return state_->timeout(); }

void ProcessGroup::set_timeout(std::chrono::milliseconds timeout) {
  if (timeout <= std::chrono::milliseconds(0)) {
    throw InvalidArgument(cat("set_timeout: the timeout must be positive, got ", timeout.count(), " ms"));
  }
  state_->timeout_ms = timeout.count();
}

int ProcessGroup::global_rank(int rank) const {
  if (rank < 0 || rank >= state_->size) {
    throw InvalidArgument(cat("global_rank: ", rank, " is not a rank of group '", state_->name, "' (0 to ", state_->size - 1, ")"));
  }
  return state_->global_ranks[rank];
}

std::uint64_t ProcessGroup::sequence_number() const {
  std::lock_guard lock(state_->issue_mutex);
  return state_->next_seq;
}

std::shared_ptr<Work> ProcessGroup::all_reduce(Buffer data, ReduceOp op) {
  return state_->issue({.type = OpType::AllReduce, .input = data, .output = data, .reduce_op = op});
}

std::shared_ptr<Work> ProcessGroup::broadcast(Buffer data, int root) {
  return state_->issue({.type = OpType::Broadcast, .input = data, .output = data, .root = root});
}

std::shared_ptr<Work> ProcessGroup::reduce(Buffer data, int root, ReduceOp op) {
  return state_->issue({.type = OpType::Reduce, .input = data, .output = data, .reduce_op = op, .root = root});
}

std::shared_ptr<Work> ProcessGroup::all_gather(Buffer input, Buffer output) {
  return state_->issue({.type = OpType::AllGather, .input = input, .output = output});
}

std::shared_ptr<Work> ProcessGroup::gather(Buffer input, Buffer output, int root) {
  return state_->issue({.type = OpType::Gather, .input = input, .output = output, .root = root});
}

std::shared_ptr<Work> ProcessGroup::scatter(Buffer input, Buffer output, int root) {
  return state_->issue({.type = OpType::Scatter, .input = input, .output = output, .root = root});
}

std::shared_ptr<Work> ProcessGroup::reduce_scatter(Buffer input, Buffer output, ReduceOp op) {
  return state_->issue({.type = OpType::ReduceScatter, .input = input, .output = output, .reduce_op = op});
}

std::shared_ptr<Work> ProcessGroup::all_to_all(Buffer input, Buffer output) {
  return state_->issue({.type = OpType::AllToAll, .input = input, .output = output});
}

std::shared_ptr<Work> ProcessGroup::barrier() { return state_->issue({.type = OpType::Barrier}); }

std::shared_ptr<Work> ProcessGroup::send(Buffer data, int dst, std::uint32_t tag) {
  return state_->issue_p2p({.type = OpType::Send, .input = data, .output = data, .peer = dst, .tag = tag});
}

std::shared_ptr<Work> ProcessGroup::recv(Buffer data, int src, std::uint32_t tag) {
  return state_->issue_p2p({.type = OpType::Recv, .input = data, .output = data, .peer = src, .tag = tag});
}

}  // namespace ddp
