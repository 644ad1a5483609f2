#include "group/local_backend.h"

#include "ddp/error.h"

namespace ddp::detail {
namespace {

class LocalBackend final : public Backend {
 public:
  LocalBackend(std::string_view name, DeviceFilter accepts, BufferCopy copy)
      : name_(name), accepts_(std::move(accepts)), copy_(std::move(copy)) {}
  std::string_view name() const override { return name_; }
  int rank() const override { return 0; }
  int size() const override { return 1; }
  bool accepts(const Device& device) const override { return accepts_(device); }
  bool supports(DataType, ReduceOp) const override { return true; }  // the reduction of one value is itself

  void all_reduce(Buffer, ReduceOp, Deadline) override {}
  void broadcast(Buffer, int, Deadline) override {}
  void reduce(Buffer, ReduceOp, int, Deadline) override {}
  void all_gather(Buffer input, Buffer output, Deadline) override { copy_(input, output); }
  void gather(Buffer input, Buffer output, int, Deadline) override { copy_(input, output); }
  void scatter(Buffer input, Buffer output, int, Deadline) override { copy_(input, output); }
  void reduce_scatter(Buffer input, Buffer output, ReduceOp, Deadline) override { copy_(input, output); }
  void all_to_all(Buffer input, Buffer output, Deadline) override { copy_(input, output); }
  void barrier(Deadline) override {}
  Waiter post_send(Buffer, int, std::uint32_t) override { throw InvalidArgument("send: a group of one has no peer"); }
  Waiter post_recv(Buffer, int, std::uint32_t) override { throw InvalidArgument("recv: a group of one has no peer"); }
  void abort() noexcept override {}

 private:
  std::string name_;
  DeviceFilter accepts_;
  BufferCopy copy_;
};

}  // namespace

std::unique_ptr<Backend> make_local_backend(std::string_view name, DeviceFilter accepts, BufferCopy copy) {
  return std::make_unique<LocalBackend>(name, std::move(accepts), std::move(copy));
}

}  // namespace ddp::detail
