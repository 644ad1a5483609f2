// Pure parts of the process group: argument checks, descriptions, fingerprints, diagnosis,
// progress records (and their publication) and the reduction kernels.
#include "op/op.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

#include "ddp/error.h"
#include "ddp/hash_store.h"
#include "group/diagnosis.h"
#include "group/progress.h"
#include "reduce/half.h"
#include "reduce/reduce.h"
#include "support/expect_error.h"

namespace ddp::detail {
namespace {

float data[64];
Buffer buf(std::size_t n, DataType t = DataType::Float32) { return Buffer{data, n, t}; }

std::string error_of(const Op& op, int rank, int size) {
  return test::message_of<InvalidArgument>([&] { validate(op, rank, size); });
}

TEST(OpValidation, NamesEachBadArgument) {
  EXPECT_NE(error_of({.type = OpType::Broadcast, .input = buf(4), .output = buf(4), .root = 3}, 0, 3)
                .find("root 3 is not a rank of this group (ranks 0 to 2)"),
            std::string::npos);
  EXPECT_NE(error_of({.type = OpType::Reduce, .input = buf(4), .output = buf(4), .root = -1}, 0, 3).find("root -1"),
            std::string::npos);
  EXPECT_NE(error_of({.type = OpType::AllReduce, .input = buf(4), .output = buf(4), .reduce_op = ReduceOp::BXOR}, 0, 2)
                .find("bitwise operation and needs an integer type, not float32"),
            std::string::npos);
  EXPECT_NE(error_of({.type = OpType::AllGather, .input = buf(4), .output = buf(7)}, 0, 2)
                .find("output holds 7 elements but must hold 8"),
            std::string::npos);
  EXPECT_NE(error_of({.type = OpType::AllGather, .input = buf(4), .output = buf(8, DataType::Int32)}, 0, 2)
                .find("input is float32 but the output is int32"),
            std::string::npos);
  EXPECT_NE(error_of({.type = OpType::ReduceScatter, .input = buf(5), .output = buf(2)}, 0, 2).find("must hold 4"),
            std::string::npos);
  EXPECT_NE(
      error_of({.type = OpType::AllToAll, .input = buf(5), .output = buf(5)}, 0, 2).find("multiple of the world size"),
      std::string::npos);
  EXPECT_NE(error_of({.type = OpType::Gather, .input = buf(3), .output = buf(5), .root = 1}, 1, 2).find("on the root"),
            std::string::npos);
  EXPECT_EQ(error_of({.type = OpType::Gather, .input = buf(3), .output = buf(0), .root = 1}, 0, 2), "no error");
  EXPECT_NE(error_of({.type = OpType::Send, .input = buf(3), .output = buf(3), .peer = 0}, 0, 2)
                .find("cannot send to itself"),
            std::string::npos);
  EXPECT_NE(error_of({.type = OpType::Recv, .input = buf(3), .output = buf(3), .peer = 5}, 0, 2).find("source rank 5"),
            std::string::npos);
  Buffer null{nullptr, 3, DataType::Float32};
  EXPECT_NE(error_of({.type = OpType::AllReduce, .input = null, .output = null}, 0, 2).find("null data pointer"),
            std::string::npos);
  EXPECT_EQ(error_of({.type = OpType::AllReduce, .input = buf(0), .output = buf(0)}, 0, 2), "no error");
}

TEST(OpDescription, IsReadableAndSurvivesTheFingerprint) {
  Op op{.type = OpType::AllReduce, .seq = 12, .input = buf(1000), .output = buf(1000), .reduce_op = ReduceOp::MAX};
  EXPECT_EQ(describe(op), "all_reduce #12 (float32 x 1000, MAX)");
  EXPECT_EQ(describe(fingerprint(op)), describe(op));
  Op bcast{.type = OpType::Broadcast,
           .seq = 3,
           .input = buf(5, DataType::Int64),
           .output = buf(5, DataType::Int64),
           .root = 2};
  EXPECT_EQ(describe(bcast), "broadcast #3 (int64 x 5, root 2)");
  EXPECT_EQ(describe(fingerprint(bcast)), describe(bcast));
  EXPECT_EQ(describe(Op{.type = OpType::Barrier, .seq = 9}), "barrier #9");
  EXPECT_NE(fingerprint(op), fingerprint(bcast));
  Op other_count = op;
  other_count.input.count = 999;
  EXPECT_NE(fingerprint(op), fingerprint(other_count));
}

TEST(Progress, RecordsRoundTripAndRejectJunk) {
  ProgressRecord r{5, 4, fingerprint(Op{.type = OpType::Barrier, .seq = 4})};
  auto back = decode_progress(encode(r));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->started, 5u);
  EXPECT_EQ(back->finished, 4u);
  EXPECT_EQ(back->last, r.last);
  EXPECT_FALSE(decode_progress("garbage"));
  EXPECT_FALSE(decode_progress("1 2 zz"));
}

// The reporter thread rests 20 ms after each write, so a record that changes right after one
// would wait that long; a process about to end (flight/last_words) writes it before it goes on.
TEST(Progress, PublishNowWritesAChangedRecordBeforeReturning) {
  auto store = std::make_shared<HashStore>();
  ProgressSlot slot(store, 3);
  const Op first{.type = OpType::Barrier, .seq = 0};
  slot.started(first);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!store->check({progress_key(3)})) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the reporter never wrote the first record";
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  const Op second{.type = OpType::AllReduce, .seq = 1, .input = buf(4), .output = buf(4)};
  slot.started(second);  // the reporter is resting now
  publish_progress_now();
  auto record = decode_progress(store->get(progress_key(3)));
  ASSERT_TRUE(record);
  EXPECT_EQ(record->started, 2u);
  EXPECT_EQ(record->last, fingerprint(second));
  publish_progress_now();  // nothing changed: nothing to write, and it returns
}

TEST(Diagnosis, NamesLostMismatchedAndLateRanks) {
  Op op{.type = OpType::AllReduce, .seq = 7, .input = buf(10), .output = buf(10)};
  Op other = op;
  other.type = OpType::Broadcast;
  PeerState me{0, 0};
  PeerState late{1, 1, ProgressRecord{7, 7, fingerprint(Op{.type = OpType::Barrier, .seq = 6})}};
  PeerState never{2, 2};
  PeerState there{3, 3, ProgressRecord{8, 7, fingerprint(op)}};
  PeerState elsewhere{4, 4, ProgressRecord{8, 7, fingerprint(other)}};
  PeerState lost{5, 5, std::nullopt, std::string("pid 42 on node7")};

  auto d = diagnose(op, 0, {{me, late, never, there}});
  EXPECT_EQ(d.kind, Diagnosis::Kind::Behind);
  EXPECT_NE(d.text.find("rank 1: its last was barrier #6, finished"), std::string::npos) << d.text;
  EXPECT_NE(d.text.find("rank 2: it has not started any collective"), std::string::npos) << d.text;
  EXPECT_EQ(d.text.find("rank 3"), std::string::npos) << d.text;

  d = diagnose(op, 0, {{me, there, elsewhere}});
  EXPECT_EQ(d.kind, Diagnosis::Kind::Mismatch);
  EXPECT_NE(d.text.find("rank 4 called broadcast #7"), std::string::npos) << d.text;

  d = diagnose(op, 0, {{me, late, lost}});
  EXPECT_EQ(d.kind, Diagnosis::Kind::Lost);
  EXPECT_NE(d.text.find("rank 5 (pid 42 on node7)"), std::string::npos) << d.text;

  // A rank lost after it called something else (Gloo's ring ends the rank whose receive a larger
  // message overflows): the different call is the cause, the loss is named too.
  PeerState lost_elsewhere{4, 4, ProgressRecord{8, 7, fingerprint(other)}, std::string("pid 43 on node7")};
  d = diagnose(op, 0, {{me, there, lost_elsewhere}});
  EXPECT_EQ(d.kind, Diagnosis::Kind::Mismatch);
  EXPECT_NE(d.text.find("rank 4 called broadcast #7"), std::string::npos) << d.text;
  EXPECT_NE(d.text.find("Lost rank 4 (pid 43 on node7)"), std::string::npos) << d.text;

  // Everyone reached it: the ranks still inside are named; a rank that finished it is not.
  PeerState done{6, 6, ProgressRecord{8, 8, fingerprint(op)}};
  d = diagnose(op, 0, {{me, there, done}});
  EXPECT_EQ(d.kind, Diagnosis::Kind::Behind);
  EXPECT_NE(d.text.find("Every rank reached all_reduce #7 (float32 x 10, SUM); still inside it: rank 3."),
            std::string::npos)
      << d.text;
  EXPECT_EQ(d.text.find("rank 6"), std::string::npos) << d.text;
  EXPECT_EQ(diagnose(op, 0, {{me, done}}).kind, Diagnosis::Kind::None);
  d = diagnose(op, 0, {{me}, "connection refused"});
  EXPECT_EQ(d.kind, Diagnosis::Kind::Lost);
  EXPECT_NE(d.text.find("rank 0, or the launcher"), std::string::npos) << d.text;
}

TEST(HalfFloats, ConvertEveryFp16ValueExactlyAndRoundToNearestEven) {
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    float f = fp16_to_float(static_cast<std::uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(fp16_to_float(float_to_fp16(f))));
      continue;
    }
    ASSERT_EQ(float_to_fp16(f), h) << "fp16 " << h << " -> " << f;
  }
  EXPECT_EQ(fp16_to_float(float_to_fp16(1.0f + 1.0f / 2048)), 1.0f);                // halfway: to even
  EXPECT_EQ(fp16_to_float(float_to_fp16(1.0f + 3.0f / 2048)), 1.0f + 2.0f / 1024);  // halfway: to even (up)
  EXPECT_EQ(float_to_fp16(65520.0f), 0x7c00);                                       // overflow to infinity
  EXPECT_EQ(float_to_fp16(65519.0f), 0x7bff);
  EXPECT_EQ(float_to_fp16(std::ldexp(1.0f, -25)), 0x0000);  // half the smallest subnormal: to even (0)
  EXPECT_EQ(float_to_fp16(std::ldexp(1.5f, -25)), 0x0001);
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    float f = bf16_to_float(static_cast<std::uint16_t>(h));
    if (!std::isnan(f)) {
      ASSERT_EQ(float_to_bf16(f), h);
    }
  }
  EXPECT_EQ(float_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);  // halfway: to even
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::nanf("")))));
}

TEST(Reduce, SixteenBitFloatsAreComputedInFloat32) {
  // 2048 + 1 is not representable in fp16, but (2048 + 1) + 1 = 2050 is: each reduction step
  // rounds once, from float32.
  std::uint16_t a[2] = {float_to_fp16(2048), float_to_fp16(0.1f)};
  std::uint16_t b[2] = {float_to_fp16(2), float_to_fp16(0.2f)};
  reduce(a, a, b, 2, DataType::Float16, ReduceOp::SUM);
  EXPECT_EQ(fp16_to_float(a[0]), 2050.0f);
  EXPECT_EQ(a[1], float_to_fp16(fp16_to_float(float_to_fp16(0.1f)) + fp16_to_float(float_to_fp16(0.2f))));
  std::int32_t x[3] = {7, -7, 9}, y[3] = {2, 2, 3};
  divide(x, 3, DataType::Int32, 2);
  EXPECT_EQ(x[0], 3);
  EXPECT_EQ(x[1], -3);  // toward zero, as torch
  reduce(x, x, y, 3, DataType::Int32, ReduceOp::BXOR);
  EXPECT_EQ(x[2], 4 ^ 3);
}

}  // namespace
}  // namespace ddp::detail
