// The pure parts of the shared-memory path: the reduction kernel against a scalar reference, the
// host plan, identities, the segment layout, the ops' signatures and what a wait says when a peer
// is gone.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "reduce/half.h"
#include "shm/host_collectives.h"
#include "shm/kernels.h"
#include "shm/layout.h"
#include "shm/liveness.h"
#include "shm/op_signature.h"
#include "ddp/error.h"
#include "shm/rendezvous.h"
#include "shm/shared_buffers.h"
#include "shm/sync.h"
#include "shm/topology.h"
#include "shm_support.h"
#include "support/expect_error.h"

namespace ddp::detail::shm {
namespace {

// A value of `dtype` held as a double, stored and loaded through the type's own bits.
double load(const unsigned char* p, DataType t) {
  switch (t) {
    case DataType::Float32: {
      float v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case DataType::Float64: {
      double v;
      std::memcpy(&v, p, 8);
      return v;
    }
    case DataType::Float16: {
      std::uint16_t v;
      std::memcpy(&v, p, 2);
      return fp16_to_float(v);
    }
    case DataType::BFloat16: {
      std::uint16_t v;
      std::memcpy(&v, p, 2);
      return bf16_to_float(v);
    }
    case DataType::Int8: return static_cast<std::int8_t>(*p);
    case DataType::UInt8: return *p;
    case DataType::Int32: {
      std::int32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case DataType::Int64: {
      std::int64_t v;
      std::memcpy(&v, p, 8);
      return static_cast<double>(v);
    }
  }
  return 0;
}

void store(unsigned char* p, DataType t, double x) {
  switch (t) {
    case DataType::Float32: {
      float v = static_cast<float>(x);
      std::memcpy(p, &v, 4);
      return;
    }
    case DataType::Float64: std::memcpy(p, &x, 8); return;
    case DataType::Float16: {
      auto v = float_to_fp16(static_cast<float>(x));
      std::memcpy(p, &v, 2);
      return;
    }
    case DataType::BFloat16: {
      auto v = float_to_bf16(static_cast<float>(x));
      std::memcpy(p, &v, 2);
      return;
    }
    case DataType::Int8: *p = static_cast<unsigned char>(static_cast<std::int8_t>(x)); return;
    case DataType::UInt8: *p = static_cast<unsigned char>(x); return;
    case DataType::Int32: {
      auto v = static_cast<std::int32_t>(x);
      std::memcpy(p, &v, 4);
      return;
    }
    case DataType::Int64: {
      auto v = static_cast<std::int64_t>(x);
      std::memcpy(p, &v, 8);
      return;
    }
  }
}

// The expected result, computed in double (exact for these inputs) or in the type for integers,
// then rounded to the element type once, as the kernel promises.
double expected(const std::vector<double>& xs, DataType t, ReduceOp op) {
  const bool integer = !is_floating_point(t);
  auto wrap = [&](double v) {  // integer arithmetic wraps in the element type
    if (!integer) return v;
    unsigned char buf[8];
    store(buf, t, static_cast<double>(static_cast<std::int64_t>(v)));
    return load(buf, t);
  };
  double acc = xs[0];
  for (std::size_t k = 1; k < xs.size(); ++k) {
    const double y = xs[k];
    switch (op) {
      case ReduceOp::SUM:
      case ReduceOp::AVG: acc = wrap(acc + y); break;
      case ReduceOp::PRODUCT: acc = wrap(acc * y); break;
      case ReduceOp::MIN: acc = std::min(acc, y); break;
      case ReduceOp::MAX: acc = std::max(acc, y); break;
      case ReduceOp::BAND:
        acc = static_cast<double>(static_cast<std::int64_t>(acc) & static_cast<std::int64_t>(y));
        break;
      case ReduceOp::BOR:
        acc = static_cast<double>(static_cast<std::int64_t>(acc) | static_cast<std::int64_t>(y));
        break;
      case ReduceOp::BXOR:
        acc = static_cast<double>(static_cast<std::int64_t>(acc) ^ static_cast<std::int64_t>(y));
        break;
    }
  }
  if (op == ReduceOp::AVG) {
    const double n = static_cast<double>(xs.size());
    if (integer) acc = std::trunc(acc / n);
    else if (t == DataType::Float64) acc /= n;
    else acc = static_cast<float>(acc) / static_cast<float>(n);
  }
  unsigned char buf[8];
  store(buf, t, acc);
  return load(buf, t);
}

TEST(ShmKernel, EveryDtypeOpAndSourceCountMatchesAScalarReference) {
  const DataType types[] = {DataType::Float32, DataType::Float64, DataType::Float16, DataType::BFloat16,
                            DataType::Int8,    DataType::UInt8,   DataType::Int32,   DataType::Int64};
  std::mt19937 rng(7);
  for (DataType t : types) {
    const std::size_t e = element_size(t);
    std::vector<ReduceOp> ops = {ReduceOp::SUM, ReduceOp::AVG, ReduceOp::PRODUCT, ReduceOp::MIN, ReduceOp::MAX};
    if (!is_floating_point(t)) ops.insert(ops.end(), {ReduceOp::BAND, ReduceOp::BOR, ReduceOp::BXOR});
    for (ReduceOp op : ops) {
      for (int n : {1, 2, 3, 5}) {
        for (std::size_t count :
             {std::size_t{1}, std::size_t{7}, std::size_t{1023}, std::size_t{1024}, std::size_t{2500}}) {
          std::vector<std::vector<unsigned char>> in(n, std::vector<unsigned char>(count * e));
          for (auto& buf : in) {
            for (std::size_t i = 0; i < count; ++i) {
              // Small integers (exact everywhere), with halves for the float types.
              double v = static_cast<double>(static_cast<int>(rng() % 21) - 10);
              if (op == ReduceOp::PRODUCT) v = static_cast<double>(static_cast<int>(rng() % 3) - 1);
              if (t == DataType::UInt8 && v < 0) v = -v;
              if (is_floating_point(t) && op != ReduceOp::PRODUCT && rng() % 2) v += 0.5;
              store(buf.data() + i * e, t, v);
            }
          }
          std::vector<const void*> srcs;
          for (auto& buf : in) srcs.push_back(buf.data());
          std::vector<unsigned char> out(count * e), out2(count * e);
          reduce(out.data(), out2.data(), srcs.data(), n, count, t, op);
          int bad = 0;
          for (std::size_t i = 0; i < count && bad < 3; ++i) {
            std::vector<double> xs;
            for (auto& buf : in) xs.push_back(load(buf.data() + i * e, t));
            const double want = expected(xs, t, op);
            const double got = load(out.data() + i * e, t);
            if (got != want) {
              ++bad;
              ADD_FAILURE() << to_string(t) << " " << to_string(op) << " n=" << n << " count=" << count << " element "
                            << i << ": got " << got << ", expected " << want;
            }
          }
          EXPECT_EQ(out, out2) << "the second destination differs";
          // In place, as the collectives call it: the destination is one of the sources.
          for (int k : {0, n - 1}) {
            std::vector<unsigned char> own = in[k];
            std::vector<const void*> aliased = srcs;
            aliased[k] = own.data();
            reduce(own.data(), nullptr, aliased.data(), n, count, t, op);
            EXPECT_EQ(own, out) << to_string(t) << " " << to_string(op) << " n=" << n << " count=" << count
                                << ": in place into source " << k << " differs";
          }
          std::vector<unsigned char> only2(count * e);
          reduce(nullptr, only2.data(), srcs.data(), n, count, t, op);
          EXPECT_EQ(only2, out) << "the second destination alone differs";
        }
      }
    }
  }
}

TEST(ShmKernel, AnAverageOverMoreRanksThanAnInt8HoldsDividesByTheirTrueCount) {
  std::vector<std::int8_t> zero(5, 0), top(5, 127), out(5, 9);
  std::vector<const void*> srcs(130, zero.data());
  srcs[0] = top.data();
  reduce(out.data(), nullptr, srcs.data(), 130, out.size(), DataType::Int8, ReduceOp::AVG);
  EXPECT_EQ(out, std::vector<std::int8_t>(5, 0)) << "127 / 130 truncates to 0 (130 as an int8 is -126)";
}

TEST(ShmKernel, SixteenBitFloatsAreAccumulatedInFloat32AndRoundedOnce) {
  // 2048 + 1 + 1 in float16: pairwise rounding gives 2048 (each +1 rounds away); float32 gives 2050.
  const std::uint16_t big = float_to_fp16(2048.0f), one = float_to_fp16(1.0f);
  const std::uint16_t a[1] = {big}, b[1] = {one}, c[1] = {one};
  const void* srcs[] = {a, b, c};
  std::uint16_t out[1];
  reduce(out, nullptr, srcs, 3, 1, DataType::Float16, ReduceOp::SUM);
  EXPECT_EQ(fp16_to_float(out[0]), 2050.0f);
  // bfloat16: 256 + 1 + 1 is 258 in float32, and 258 is a bfloat16.
  const std::uint16_t x[1] = {float_to_bf16(256.0f)}, y[1] = {float_to_bf16(1.0f)};
  const void* bsrcs[] = {x, y, y};
  reduce(out, nullptr, bsrcs, 3, 1, DataType::BFloat16, ReduceOp::SUM);
  EXPECT_EQ(bf16_to_float(out[0]), 258.0f);
}

TEST(ShmKernel, Float16ConversionsMatchTheSoftwareOnesForEveryValue) {
  // The kernel may convert with F16C; it must agree with reduce/half.h on every non-NaN value.
  std::vector<std::uint16_t> all(65536);
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<std::uint16_t>(i);
  std::vector<std::uint16_t> out(all.size());
  const void* one[] = {all.data()};
  reduce(out.data(), nullptr, one, 1, all.size(), DataType::Float16, ReduceOp::SUM);
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (std::isnan(fp16_to_float(all[i]))) {
      EXPECT_TRUE(std::isnan(fp16_to_float(out[i])));
    } else {
      ASSERT_EQ(out[i], all[i]) << "value " << i;
    }
  }
  // Narrowing: sums and averages of two float16 values fall between float16 steps (ties
  // included) and must round to nearest even exactly as the software does.
  for (std::size_t i = 0; i + 1 < all.size(); i += 89) {
    for (std::size_t j : {i + 1, (i * 7919) % all.size()}) {
      const std::uint16_t p[1] = {all[i]}, q[1] = {all[j]};
      const float fp = fp16_to_float(p[0]), fq = fp16_to_float(q[0]);
      if (std::isnan(fp) || std::isnan(fq)) continue;
      const void* two[] = {p, q};
      std::uint16_t r[1];
      reduce(r, nullptr, two, 2, 1, DataType::Float16, ReduceOp::SUM);
      std::uint16_t want = float_to_fp16(fp + fq);
      if (!std::isnan(fp16_to_float(want))) {
        EXPECT_EQ(r[0], want) << "sum of " << p[0] << " and " << q[0];
      }
      reduce(r, nullptr, two, 2, 1, DataType::Float16, ReduceOp::AVG);
      want = float_to_fp16((fp + fq) / 2.0f);
      if (!std::isnan(fp16_to_float(want))) {
        EXPECT_EQ(r[0], want) << "average of " << p[0] << " and " << q[0];
      }
    }
  }
}

TEST(ShmPlan, GroupsRanksByHostInRankOrder) {
  std::vector<Identity> ids = {{true, 10, "a"}, {true, 11, "b"}, {true, 12, "a"}, {true, 13, "c"}, {true, 14, "b"}};
  Plan p = make_plan(ids, 4);
  EXPECT_TRUE(p.shm);
  ASSERT_EQ(p.hosts.size(), 3u);
  EXPECT_EQ(p.hosts[0], (std::vector<int>{0, 2}));
  EXPECT_EQ(p.hosts[1], (std::vector<int>{1, 4}));
  EXPECT_EQ(p.hosts[2], (std::vector<int>{3}));
  EXPECT_EQ(p.host, 1);
  EXPECT_EQ(p.local, 1);
  EXPECT_FALSE(p.single_host());
  Plan leader = make_plan(ids, 3);
  EXPECT_EQ(leader.host, 2);
  EXPECT_EQ(leader.local, 0);
}

TEST(ShmPlan, OffWhenAnyRankDisablesItOrNoHostHasTwoRanks) {
  std::vector<Identity> ids = {{true, 1, "a"}, {false, 2, "a"}, {true, 3, "a"}};
  EXPECT_FALSE(make_plan(ids, 0).shm);
  EXPECT_FALSE(make_plan(ids, 1).shm);
  std::vector<Identity> apart = {{true, 1, "a"}, {true, 2, "b"}};
  EXPECT_FALSE(make_plan(apart, 0).shm);
  std::vector<Identity> together = {{true, 1, "a"}, {true, 2, "a"}};
  EXPECT_TRUE(make_plan(together, 1).shm);
  EXPECT_TRUE(make_plan(together, 1).single_host());
}

TEST(ShmPlan, EqualHostsAreStripedAndUnequalOnesAreNot) {
  // Across hosts, all_reduce is striped over every rank's lane only when each host has as many ranks.
  std::vector<Identity> two_by_two = {{true, 1, "a"}, {true, 2, "b"}, {true, 3, "a"}, {true, 4, "b"}};
  EXPECT_TRUE(equal_hosts(make_plan(two_by_two, 0)));
  std::vector<Identity> three_and_two = {
      {true, 1, "a"}, {true, 2, "a"}, {true, 3, "a"}, {true, 4, "b"}, {true, 5, "b"}};
  EXPECT_FALSE(equal_hosts(make_plan(three_and_two, 0)));
}

TEST(ShmShares, TileTheBufferInRankOrderOnWholeLines) {
  for (DataType dtype : {DataType::Float32, DataType::Float64, DataType::Int8, DataType::Float16}) {
    const std::size_t line = 64 / element_size(dtype);
    for (int ranks : {1, 2, 3, 4, 7}) {
      for (std::size_t count : {std::size_t{0}, std::size_t{1}, line - 1, line, 3 * line + 5, std::size_t{100003}}) {
        std::size_t next = 0;
        for (int r = 0; r < ranks; ++r) {
          const auto s = share_of(count, dtype, ranks, r);
          EXPECT_EQ(s.begin, next) << "rank " << r << " of " << ranks << ", count " << count;
          if (s.begin + s.length < count) {
            EXPECT_EQ(s.length % line, 0u) << "a share ends mid-line";
          }
          next = s.begin + s.length;
        }
        EXPECT_EQ(next, count) << ranks << " ranks, count " << count;
      }
    }
  }
}

TEST(ShmOpSignature, TellsOpsApartAndSaysWhatEachIs) {
  const std::vector<std::uint64_t> distinct = {
      op_signature(OpKind::AllReduce, DataType::Float32, 16),
      op_signature(OpKind::AllReduce, DataType::Float32, 17),
      op_signature(OpKind::AllReduce, DataType::Float64, 16),
      op_signature(OpKind::AllReduce, DataType::Float32, 16, ReduceOp::MAX),
      op_signature(OpKind::Reduce, DataType::Float32, 16, ReduceOp::SUM, 0),
      op_signature(OpKind::Reduce, DataType::Float32, 16, ReduceOp::SUM, 1),
      op_signature(OpKind::ReduceScatter, DataType::Float32, 16),
      op_signature(OpKind::Broadcast, DataType::UInt8, 64, ReduceOp::SUM, 0),
      op_signature(OpKind::Broadcast, DataType::UInt8, 64, ReduceOp::SUM, 1),
      op_signature(OpKind::AllGather, DataType::UInt8, 64),
      op_signature(OpKind::Barrier, DataType::UInt8, 0),
      op_signature(OpKind::ReduceShare, DataType::Float32, 16),
      op_signature(OpKind::GatherShares, DataType::Float32, 16),
  };
  for (std::size_t i = 0; i < distinct.size(); ++i) {
    EXPECT_NE(distinct[i], 0u) << i;  // 0 marks a later step of an op
    for (std::size_t j = 0; j < i; ++j) EXPECT_NE(distinct[i], distinct[j]) << i << " and " << j;
  }
  // Byte-moving ops compare bytes, not element types.
  EXPECT_EQ(op_signature(OpKind::Broadcast, DataType::Float32, 64, ReduceOp::MAX, 1),
            op_signature(OpKind::Broadcast, DataType::UInt8, 64, ReduceOp::SUM, 1));
  EXPECT_EQ(describe_op(op_signature(OpKind::AllReduce, DataType::Float32, 16)), "all_reduce (float32 x 16, SUM)");
  EXPECT_EQ(describe_op(op_signature(OpKind::Reduce, DataType::Int64, 3, ReduceOp::MAX, 2)),
            "reduce (int64 x 3, MAX, to host rank 2)");
  EXPECT_EQ(describe_op(op_signature(OpKind::Broadcast, DataType::UInt8, 4096, ReduceOp::SUM, 1)),
            "broadcast (4096 bytes from host rank 1)");
  EXPECT_EQ(describe_op(op_signature(OpKind::AllGather, DataType::UInt8, 8)), "all_gather (8 bytes per rank)");
  EXPECT_EQ(describe_op(op_signature(OpKind::Barrier, DataType::UInt8, 0)), "barrier");
  EXPECT_EQ(describe_op(0), "a later step of an op it began earlier");
}

TEST(ShmIdentity, RoundTripsAndRejectsJunk) {
  Identity id{true, 4242, "node 3/abc/pidns:123"};
  EXPECT_EQ(decode_identity(encode(id)), id);
  Identity off{false, 1, "x"};
  EXPECT_EQ(decode_identity(encode(off)), off);
  for (const char* junk : {"", "1", "1 2", "2 5 h", "1 -3 h", "1 x h", "x 1 h"}) {
    EXPECT_FALSE(decode_identity(junk)) << junk;
  }
  const std::string here = local_host_identity();
  EXPECT_NE(here.find("/pidns:"), std::string::npos) << here;
  EXPECT_EQ(here, local_host_identity());
}

TEST(ShmLayout, KeepsControlsOnTheirOwnLinesAndSlotsApart) {
  Layout l = Layout::make(3, 8192);
  EXPECT_EQ(l.slot_bytes, 3u * 8192);
  EXPECT_EQ(l.data_offset % kPage, 0u);
  EXPECT_GE(l.control_offset, sizeof(Header));
  EXPECT_EQ(l.total_bytes, l.data_offset + 2 * 3 * l.slot_bytes);
  std::vector<char> base(l.total_bytes);
  EXPECT_EQ(reinterpret_cast<char*>(l.control(base.data(), 1)) - reinterpret_cast<char*>(l.control(base.data(), 0)),
            128);
  EXPECT_EQ(l.slot(base.data(), 0, 1) - l.slot(base.data(), 0, 0), static_cast<std::ptrdiff_t>(l.slot_bytes));
  EXPECT_EQ(l.slot(base.data(), 2, 1) + l.slot_bytes, base.data() + l.total_bytes);
  EXPECT_EQ(l.slot(base.data(), 1, 2), l.slot(base.data(), 1, 0));  // parity
}

TEST(ShmLayout, TheChunkShrinksToKeepManyRanksUnderTheCap) {
  Tuning t;
  t.chunk_bytes = 256 << 10;
  t.max_segment_bytes = 64 << 20;
  EXPECT_EQ(chunk_for(t, 2), 256u << 10);
  const std::size_t c = chunk_for(t, 64);
  EXPECT_LT(c, 256u << 10);
  EXPECT_EQ(c % kPage, 0u);
  EXPECT_LE(Layout::make(64, c).total_bytes, t.max_segment_bytes);
  t.chunk_bytes = 5000;  // rounded down to whole pages
  EXPECT_EQ(chunk_for(t, 2), 4096u);
}

// Two ranks' registries on one table, both in this process: rank 1 maps rank 0's memory through
// /proc/<this pid>/fd as a peer on the host would.
TEST(ShmSharedBuffers, APeerFindsTheBufferWhereItsOwnerPublishedIt) {
  const Layout l = Layout::make(2, kPage);
  std::vector<char> table(l.total_bytes);
  auto owner = std::make_shared<SharedBuffers>(table.data(), l, 0, std::vector<pid_t>{-1, ::getpid()});
  auto peer = std::make_shared<SharedBuffers>(table.data(), l, 1, std::vector<pid_t>{::getpid(), -1});
  auto memory = owner->allocate(10000);
  ASSERT_TRUE(memory);
  char* data = static_cast<char*>(memory.get());
  std::memset(data, 7, 10000);
  data[100] = 42;
  EXPECT_EQ(owner->locate(data - 1, 10), 0u) << "before it";
  EXPECT_EQ(owner->locate(data + 8000, 100000), 0u) << "past its end";
  EXPECT_EQ(peer->locate(data, 10), 0u) << "not the peer's";
  const std::uint64_t where = owner->locate(data + 100, 50);
  ASSERT_NE(where, 0u);
  char* seen = peer->peer(0, where, 50);
  EXPECT_NE(seen, data + 100) << "a mapping of its own";
  EXPECT_EQ(seen[0], 42);
  data[100] = 43;  // the same memory
  EXPECT_EQ(seen[0], 43);
  seen[49] = 44;  // writable: all_reduce writes its reduced share into its peers' buffers
  EXPECT_EQ(data[149], 44);
  test::expect_error<Error>([&] { peer->peer(0, where, 1 << 20); }, {"is not inside a live region"});
  test::expect_error<Error>([&] { peer->peer(0, 1, 8); }, {"which has none"});
  // Freed, then the entry reused: the peer drops the old mapping for the new memory.
  memory.reset();
  test::expect_error<Error>([&] { peer->peer(0, where, 50); }, {"was its memory freed during the op?"});
  auto again = owner->allocate(200);
  ASSERT_TRUE(again);
  static_cast<char*>(again.get())[100] = 9;
  const std::uint64_t where2 = owner->locate(static_cast<char*>(again.get()) + 100, 1);
  EXPECT_EQ(where2 >> 48, where >> 48) << "the entry is reused";
  EXPECT_EQ(peer->peer(0, where2, 1)[0], 9);
  // Memory freed while its entry stays free: the peer drops its mapping at its next look at the
  // row, so the memory does not outlive its owner's release.
  auto other = owner->allocate(5000);
  peer->peer(0, owner->locate(other.get(), 1), 1);
  const std::size_t mapped = test::shm_mappings("ddp-shared").size();
  other.reset();
  peer->peer(0, where2, 1);
  EXPECT_EQ(test::shm_mappings("ddp-shared").size(), mapped - 2) << "the owner's mapping and the peer's";
  // A row holds kRegions allocations; the next one is refused with null, not an error.
  std::vector<std::shared_ptr<void>> many{again};
  for (std::size_t i = 1; i < kRegions; ++i) ASSERT_TRUE(many.emplace_back(owner->allocate(1))) << i;
  EXPECT_FALSE(owner->allocate(1));
  many.pop_back();
  EXPECT_TRUE(owner->allocate(1));
  // Detached (the group is gone): the memory stays usable, nothing is located in it any more.
  owner->detach();
  EXPECT_EQ(owner->locate(again.get(), 1), 0u);
  static_cast<char*>(again.get())[0] = 1;
  EXPECT_FALSE(owner->allocate(1));
}

// The pid of a process that has exited and been reaped.
pid_t a_dead_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  return child;
}

std::string wait_error(std::vector<pid_t> pids, int aborted_by) {
  const Layout l = Layout::make(3, kPage);
  std::vector<char> segment(l.total_bytes + kPage);
  void* base = segment.data() + (kPage - reinterpret_cast<std::uintptr_t>(segment.data()) % kPage) % kPage;
  l.header(base)->aborted_by.store(static_cast<std::uint32_t>(aborted_by + 1));
  Sync sync(base, l, 0, {0, 1, 2}, PeerWatch(std::move(pids)), std::chrono::microseconds(0), false);
  try {
    sync.wait_for(1, 1, std::chrono::steady_clock::now() + std::chrono::seconds(5), "all_reduce");
  } catch (const PeerLostError& e) {
    return e.what();
  }
  return "no PeerLostError";
}

TEST(ShmSync, APeerThatGaveUpAfterAnotherDiedNamesTheDeadOne) {
  // Rank 2 aborted the group, most likely on finding rank 1 dead: the error names rank 1, the cause.
  const pid_t dead = a_dead_pid();
  const std::string message = wait_error({-1, dead, ::getpid()}, 2);
  EXPECT_NE(message.find("rank 1 (pid " + std::to_string(dead) + ") exited during it"), std::string::npos) << message;
  EXPECT_NE(message.find("rank 2 (pid " + std::to_string(::getpid()) + ") gave up on the group as well"),
            std::string::npos)
      << message;
  // With every peer alive, the one that gave up is named.
  const std::string alive = wait_error({-1, ::getpid(), ::getpid()}, 2);
  EXPECT_NE(
      alive.find("rank 2 (pid " + std::to_string(::getpid()) + ") gave up on the group after an error of its own"),
      std::string::npos)
      << alive;
}

TEST(PeerWatch, WaitsForAPeerThatIsExitingAndNotForOneThatLives) {
  // A killed peer's memory vanishes a moment before its exit shows; the wait bridges that moment.
  const pid_t child = ::fork();
  if (child == 0) {
    ::usleep(200'000);
    ::_exit(0);
  }
  PeerWatch watch({-1, child});
  EXPECT_FALSE(watch.exited(1));
  EXPECT_FALSE(watch.exits_within(1, std::chrono::milliseconds(20)));
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(watch.exits_within(1, std::chrono::seconds(20)));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));  // woken by the exit, not the limit
  EXPECT_TRUE(watch.exits_within(1, std::chrono::milliseconds(0)));
  ::waitpid(child, nullptr, 0);
  EXPECT_FALSE(watch.exits_within(0, std::chrono::milliseconds(0)));  // this rank itself is never watched
}

}  // namespace
}  // namespace ddp::detail::shm
