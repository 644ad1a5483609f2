#include "collective_suite.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>

#include "reduce/half.h"

namespace ddp::test {
namespace {

const DataType kTypes[] = {DataType::Float32, DataType::Float64, DataType::Float16, DataType::BFloat16,
                           DataType::Int8,    DataType::UInt8,   DataType::Int32,   DataType::Int64};

DeviceMemory* memory = nullptr;  // where buffers live during the suite (null: host memory)
bool bitwise = true;

// A typed array held as bytes, read and written through doubles (all test values are small
// integers, exact in every type). With a DeviceMemory, buffer() hands the op a device copy and
// the next get() reads the device's result back.
class Values {
 public:
  Values(DataType dtype, std::size_t count) : dtype_(dtype), count_(count), bytes_(count * element_size(dtype) + 1) {}
  ~Values() {
    if (device_.data) memory->release(device_);
  }
  Values(const Values&) = delete;
  Values& operator=(const Values&) = delete;
  Buffer buffer() {
    if (!memory) return Buffer{bytes_.data(), count_, dtype_};
    if (!device_.data) device_ = memory->allocate(bytes_.size(), dtype_, count_);
    memory->upload(device_, bytes_.data());
    on_device_ = true;
    return device_;
  }
  std::size_t size() const { return count_; }
  double get(std::size_t i) const {
    if (on_device_) {
      memory->download(const_cast<unsigned char*>(bytes_.data()), device_);
      on_device_ = false;
    }
    const unsigned char* p = bytes_.data() + i * element_size(dtype_);
    switch (dtype_) {
      case DataType::Float32: return load<float>(p);
      case DataType::Float64: return load<double>(p);
      case DataType::Float16: return detail::fp16_to_float(load<std::uint16_t>(p));
      case DataType::BFloat16: return detail::bf16_to_float(load<std::uint16_t>(p));
      case DataType::Int8: return load<std::int8_t>(p);
      case DataType::UInt8: return load<std::uint8_t>(p);
      case DataType::Int32: return load<std::int32_t>(p);
      case DataType::Int64: return static_cast<double>(load<std::int64_t>(p));
    }
    return 0;
  }
  void set(std::size_t i, double v) {
    unsigned char* p = bytes_.data() + i * element_size(dtype_);
    switch (dtype_) {
      case DataType::Float32: return store<float>(p, static_cast<float>(v));
      case DataType::Float64: return store<double>(p, v);
      case DataType::Float16: return store<std::uint16_t>(p, detail::float_to_fp16(static_cast<float>(v)));
      case DataType::BFloat16: return store<std::uint16_t>(p, detail::float_to_bf16(static_cast<float>(v)));
      case DataType::Int8: return store<std::int8_t>(p, static_cast<std::int8_t>(v));
      case DataType::UInt8: return store<std::uint8_t>(p, static_cast<std::uint8_t>(v));
      case DataType::Int32: return store<std::int32_t>(p, static_cast<std::int32_t>(v));
      case DataType::Int64: return store<std::int64_t>(p, static_cast<std::int64_t>(v));
    }
  }

 private:
  template <typename T>
  static T load(const unsigned char* p) {
    T v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  template <typename T>
  static void store(unsigned char* p, T v) {
    std::memcpy(p, &v, sizeof v);
  }
  DataType dtype_;
  std::size_t count_;
  std::vector<unsigned char> bytes_;
  Buffer device_;
  mutable bool on_device_ = false;
};

bool is_unsigned(DataType t) { return t == DataType::UInt8; }

// The input of `rank` at index `i`: small integers, exact in every type; for PRODUCT, factors
// whose product over five ranks still fits in int8.
double input(int rank, std::size_t i, DataType t, ReduceOp op) {
  if (op == ReduceOp::PRODUCT) {
    static const double factors[] = {1, 2, -1};
    double f = factors[(i + static_cast<std::size_t>(rank)) % 3];
    return is_unsigned(t) && f < 0 ? 1 : f;
  }
  double v = static_cast<double>((i * 7 + static_cast<std::size_t>(rank) * 3) % 11);
  return is_unsigned(t) ? v : v - 5;
}

double fold(ReduceOp op, double a, double b) {
  switch (op) {
    case ReduceOp::SUM:
    case ReduceOp::AVG: return a + b;
    case ReduceOp::PRODUCT: return a * b;
    case ReduceOp::MIN: return std::min(a, b);
    case ReduceOp::MAX: return std::max(a, b);
    case ReduceOp::BAND: return static_cast<double>(static_cast<std::int64_t>(a) & static_cast<std::int64_t>(b));
    case ReduceOp::BOR: return static_cast<double>(static_cast<std::int64_t>(a) | static_cast<std::int64_t>(b));
    case ReduceOp::BXOR: return static_cast<double>(static_cast<std::int64_t>(a) ^ static_cast<std::int64_t>(b));
  }
  return 0;
}

// The reduction over every rank of input(r, i); AVG divided as ddp does (in the element type).
double reduced(int world, std::size_t i, DataType t, ReduceOp op) {
  double acc = input(0, i, t, op);
  for (int r = 1; r < world; ++r) acc = fold(op, acc, input(r, i, t, op));
  if (op != ReduceOp::AVG) return acc;
  if (!is_floating_point(t)) return std::trunc(acc / world);
  if (t == DataType::Float64) return acc / world;
  return static_cast<float>(acc) / static_cast<float>(world);  // rounded again to 16 bits below
}

std::vector<ReduceOp> ops_for(DataType t) {
  std::vector<ReduceOp> ops = {ReduceOp::SUM, ReduceOp::AVG, ReduceOp::PRODUCT, ReduceOp::MIN, ReduceOp::MAX};
  if (!is_floating_point(t) && bitwise) {
    ops.insert(ops.end(), {ReduceOp::BAND, ReduceOp::BOR, ReduceOp::BXOR});
  }
  return ops;
}

// Compares `actual` with `expected(i)` after rounding the expectation to the element type.
void expect_values(const Values& actual, DataType t, const std::function<double(std::size_t)>& expected,
                   const std::string& what) {
  Values want(t, actual.size());
  int reported = 0;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    want.set(i, expected(i));
    if (actual.get(i) != want.get(i) && reported++ < 3) {
      ADD_FAILURE() << what << ": element " << i << " is " << actual.get(i) << ", expected " << want.get(i);
    }
  }
}

std::string label(const char* op, DataType t, std::size_t n, const char* extra = "") {
  return std::string(op) + " " + std::string(to_string(t)) + " x " + std::to_string(n) + extra;
}

void run_sized(ProcessGroup& g, DataType t, std::size_t n, bool all_reduce_ops) {
  const int rank = g.rank(), world = g.size();
  const std::size_t w = static_cast<std::size_t>(world);
  for (ReduceOp op : ops_for(t)) {
    if (!all_reduce_ops && op != ReduceOp::SUM) continue;
    const std::string name = std::string(" ") + std::string(to_string(op));
    {  // all_reduce
      Values v(t, n);
      for (std::size_t i = 0; i < n; ++i) v.set(i, input(rank, i, t, op));
      g.all_reduce(v.buffer(), op)->wait();
      expect_values(
          v, t, [&](std::size_t i) { return reduced(world, i, t, op); }, label("all_reduce", t, n, name.c_str()));
    }
    {  // reduce to the last rank; others unchanged
      const int root = world - 1;
      Values v(t, n);
      for (std::size_t i = 0; i < n; ++i) v.set(i, input(rank, i, t, op));
      g.reduce(v.buffer(), root, op)->wait();
      expect_values(
          v, t, [&](std::size_t i) { return rank == root ? reduced(world, i, t, op) : input(rank, i, t, op); },
          label("reduce", t, n, name.c_str()));
    }
    {  // reduce_scatter: rank r's input chunk j is input(r, j*n + i)
      Values in(t, n * w), out(t, n);
      for (std::size_t i = 0; i < n * w; ++i) in.set(i, input(rank, i, t, op));
      g.reduce_scatter(in.buffer(), out.buffer(), op)->wait();
      expect_values(
          out, t, [&](std::size_t i) { return reduced(world, rank * n + i, t, op); },
          label("reduce_scatter", t, n, name.c_str()));
    }
  }
  const ReduceOp none = ReduceOp::SUM;
  {  // broadcast from rank world / 2
    const int root = world / 2;
    Values v(t, n);
    for (std::size_t i = 0; i < n; ++i) v.set(i, input(rank, i, t, none));
    g.broadcast(v.buffer(), root)->wait();
    expect_values(
        v, t, [&](std::size_t i) { return input(root, i, t, none); }, label("broadcast", t, n));
  }
  {  // all_gather
    Values in(t, n), out(t, n * w);
    for (std::size_t i = 0; i < n; ++i) in.set(i, input(rank, i, t, none));
    g.all_gather(in.buffer(), out.buffer())->wait();
    expect_values(
        out, t,
        [&](std::size_t i) {
      return input(static_cast<int>(i / std::max<std::size_t>(n, 1)), i % std::max<std::size_t>(n, 1), t, none);
        },
        label("all_gather", t, n));
  }
  {  // gather to rank 0
    Values in(t, n), out(t, rank == 0 ? n * w : 0);
    for (std::size_t i = 0; i < n; ++i) in.set(i, input(rank, i, t, none));
    g.gather(in.buffer(), out.buffer(), 0)->wait();
    expect_values(
        out, t, [&](std::size_t i) { return input(static_cast<int>(i / n), i % n, t, none); }, label("gather", t, n));
  }
  {  // scatter from the last rank: chunk r of the root's input is input(root, r*n + i)
    const int root = world - 1;
    Values in(t, rank == root ? n * w : 0), out(t, n);
    for (std::size_t i = 0; i < in.size(); ++i) in.set(i, input(root, i, t, none));
    g.scatter(in.buffer(), out.buffer(), root)->wait();
    expect_values(
        out, t, [&](std::size_t i) { return input(root, rank * n + i, t, none); }, label("scatter", t, n));
  }
  {  // all_to_all: chunk j of rank i lands in chunk i of rank j
    Values in(t, n * w), out(t, n * w);
    for (std::size_t i = 0; i < n * w; ++i) in.set(i, input(rank, i, t, none));
    g.all_to_all(in.buffer(), out.buffer())->wait();
    expect_values(
        out, t, [&](std::size_t i) { return input(static_cast<int>(i / n), rank * n + i % n, t, none); },
        label("all_to_all", t, n));
  }
  if (world > 1) {  // send/recv around the ring, both posted before either is waited for
    Values out(t, n), in(t, n);
    for (std::size_t i = 0; i < n; ++i) out.set(i, input(rank, i, t, none));
    auto sent = g.send(out.buffer(), (rank + 1) % world, 7);
    auto got = g.recv(in.buffer(), (rank + world - 1) % world, 7);
    sent->wait();
    got->wait();
    expect_values(
        in, t, [&](std::size_t i) { return input((rank + world - 1) % world, i, t, none); }, label("send/recv", t, n));
  }
  g.barrier()->wait();
}

}  // namespace

Buffer SharedHostMemory::allocate(std::size_t bytes, DataType dtype, std::size_t count) {
  auto memory = group_.allocate_shared_memory(bytes);
  if (!memory) {
    ADD_FAILURE() << "allocate_shared_memory(" << bytes << ") gave no memory on rank " << group_.rank();
    memory = std::shared_ptr<void>(::operator new(bytes), [](void* p) { ::operator delete(p); });
  }
  void* data = memory.get();
  live_[data] = std::move(memory);
  ++allocated_;
  return Buffer{data, count, dtype};
}

void SharedHostMemory::release(const Buffer& buffer) { live_.erase(buffer.data); }

void SharedHostMemory::upload(const Buffer& device, const void* host) {
  std::memcpy(device.data, host, device.bytes());
}

void SharedHostMemory::download(void* host, const Buffer& device) { std::memcpy(host, device.data, device.bytes()); }

void run_collective_suite(ProcessGroup& group, const SuiteOptions& options) {
  memory = options.memory;
  bitwise = options.bitwise;
  for (DataType t : kTypes) {
    for (std::size_t n : options.sizes) run_sized(group, t, n, true);
  }
  if (options.large_bytes > 0) {
    run_sized(group, DataType::Float32, options.large_bytes / 4 + 3, false);
  }
}

void run_async_burst(ProcessGroup& group, int count) {
  const int rank = group.rank(), world = group.size();
  std::vector<std::vector<std::int64_t>> data(static_cast<std::size_t>(count));
  std::vector<std::shared_ptr<Work>> works;
  for (int k = 0; k < count; ++k) {
    data[k] = {k, rank, 1};
    works.push_back(group.all_reduce(buffer_of(data[k].data(), 3)));
  }
  for (auto& w : works) w->wait();
  for (int k = 0; k < count; ++k) {
    ASSERT_EQ(data[k][0], static_cast<std::int64_t>(k) * world) << "op " << k;
    ASSERT_EQ(data[k][1], static_cast<std::int64_t>(world) * (world - 1) / 2) << "op " << k;
    ASSERT_EQ(data[k][2], world) << "op " << k;
  }
}

}  // namespace ddp::test
