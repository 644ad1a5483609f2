// ddp::Backend: what a communication engine (gloo, nccl, ...) implements. A backend only moves
// and reduces bytes. Everything every backend needs (the async queue, sequence numbers,
// timeouts, progress records, argument checks, debug checks, emulation of what it lacks) lives
// above it in ProcessGroup.
//
// Twelve methods are required (the pure virtuals below); five more (reduce, gather, scatter,
// reduce_scatter, all_to_all) have defaults that build them from the required ones, for a
// backend that has nothing better. The group emulates AVG through SUM, and 16-bit float
// reductions through float32, for any backend whose supports() says no.
//
// Calls come from one thread at a time (the group's worker, or the thread waiting for a
// Launch::OnWait op), already validated; each must finish or throw by `deadline`. Throwing any
// exception is fine: the group turns it into a ddp::Error with context. A backend of device
// buffers (nccl) queues its work after each buffer's `ready` event (ddp/types.h) and returns once
// that work has completed on the device.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "ddp/types.h"

namespace ddp {

class Store;

class Backend {
 public:
  using Deadline = std::chrono::steady_clock::time_point;

  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Whether buffers on `device` can be used (gloo: the CPU; nccl: this rank's CUDA device).
  virtual bool accepts(const Device& device) const = 0;

  // Whether the backend reduces `dtype` with `op` natively. When not, the group emulates it:
  // 16-bit floats through float32, AVG through SUM and a division.
  virtual bool supports(DataType dtype, ReduceOp op) const = 0;

  virtual void all_reduce(Buffer data, ReduceOp op, Deadline deadline) = 0;
  virtual void broadcast(Buffer data, int root, Deadline deadline) = 0;
  // output holds size() * input.count elements, rank r's input at offset r * input.count.
  virtual void all_gather(Buffer input, Buffer output, Deadline deadline) = 0;
  virtual void barrier(Deadline deadline) = 0;

  // Point to point. post_send/post_recv start the transfer without blocking and return a waiter
  // that blocks until it is done (or throws at its deadline).
  using Waiter = std::function<void(Deadline)>;
  virtual Waiter post_send(Buffer data, int dst, std::uint32_t tag) = 0;
  virtual Waiter post_recv(Buffer data, int src, std::uint32_t tag) = 0;

  // Called after an operation failed: release the connections so that peers blocked on this
  // rank fail fast instead of waiting for their timeout.
  virtual void abort() noexcept = 0;

  // --- optional: the defaults use the methods above (host buffers only) ---
  // The result lands in `data` on `root`; other ranks' `data` is left as it was.
  // Default: an all_reduce (of a copy, off the root).
  virtual void reduce(Buffer data, ReduceOp op, int root, Deadline deadline);
  // As all_gather, with the output on `root` only (others pass an empty output). Default: an all_gather.
  virtual void gather(Buffer input, Buffer output, int root, Deadline deadline);
  // `root`'s input holds size() * output.count elements; rank r receives the r-th chunk.
  // Default: a broadcast of the whole input.
  virtual void scatter(Buffer input, Buffer output, int root, Deadline deadline);
  // input holds size() * output.count elements; rank r gets the reduction of every rank's r-th chunk.
  // Default: an all_reduce of a copy of the input.
  virtual void reduce_scatter(Buffer input, Buffer output, ReduceOp op, Deadline deadline);
  // input and output hold size() equal chunks; chunk j of rank i goes to chunk i of rank j.
  // Default: an all_gather of every rank's input.
  virtual void all_to_all(Buffer input, Buffer output, Deadline deadline);

  // Host memory that this rank's peers can read where it is (ProcessGroup::allocate_shared_memory),
  // or null (the default) when the backend has none. May be called from any thread.
  virtual std::shared_ptr<void> allocate_shared(std::size_t bytes) {
    (void)bytes;
    return nullptr;
  }

  // How many hosts the group's ranks are on, as the backend learned at setup (the same on every
  // rank); 0 (the default) when it does not know. ProcessGroup::hosts() reports it.
  virtual int hosts() const { return 0; }
};

// What a backend factory gets.
struct BackendContext {
  std::shared_ptr<Store> store;  // private to this group (prefixed)
  int rank = 0;
  int size = 1;
  std::chrono::milliseconds timeout = kDefaultTimeout;
  std::string master_addr;  // the job's master host, to pick the interface that reaches it
  // The group's variables (ProcessGroupOptions::variables), in front of the process's
  // environment: a backend reads the variables it declares from them as it is made.
  std::map<std::string, std::string> variables;
};

using BackendFactory = std::function<std::unique_ptr<Backend>(const BackendContext&)>;
// Which devices' buffers a backend takes (its Backend::accepts), known before any backend exists:
// a group of one has no backend object, yet accepts what the named backend accepts.
using DeviceFilter = std::function<bool(const Device&)>;

// Throws, saying why and what to install or set, when this process cannot run the backend (nccl:
// no NCCL in this build, no GPU, or none that LOCAL_RANK names). Every rank runs it before it joins
// a group, so that one that cannot says so at once instead of leaving its peers waiting.
using UsabilityCheck = std::function<void()>;
// Copies to.bytes() bytes from `from` to `to` (equal sizes) on the devices the backend accepts, and
// has completed when it returns: what a group of one does for all_gather, gather, scatter,
// reduce_scatter and all_to_all, with no backend object to ask.
using BufferCopy = std::function<void(const Buffer& from, const Buffer& to)>;

// Everything the group knows of a backend before (or without) making one.
struct BackendRegistration {
  BackendFactory factory;
  DeviceFilter accepts;         // null: the CPU
  UsabilityCheck check_usable;  // null: always usable
  BufferCopy copy;              // null: host memory (a memmove; device buffers throw)
};

// Makes `name` available to init_process_group and new_group. Thread-safe; replaces an earlier
// registration of the same name. Throws InvalidArgument when registration.factory is null.
void register_backend(const std::string& name, BackendRegistration registration);
// The same, for buffers on the devices `accepts` admits (default: the CPU), always usable.
void register_backend(const std::string& name, BackendFactory factory, DeviceFilter accepts = nullptr);
// True when `name` is registered (a stub backend that explains what to install counts).
bool is_backend_registered(const std::string& name);

}  // namespace ddp
