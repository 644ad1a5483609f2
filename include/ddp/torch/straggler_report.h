// ddp::StragglerReport: which rank slows a synchronous job, and where its time goes.
//
// In a synchronous job every rank's step takes as long as the slowest rank's: the others spend
// the difference waiting for the buckets at the end of backward. So DDP times each rank's steps
// in four parts, forward, backward (from the end of forward, the loss included, to the last
// gradient), waiting for the buckets, and outside DDP (from the end of one backward to the next
// forward: data loading, the optimizer), and calls a rank's step without the wait its *own*
// time. The straggler is the rank whose own time is the largest; the report says how much larger
// than the other ranks' median it is and in which part it loses the most against them:
//
//   rank 3 (host h2) is the straggler: its step takes 1.41x the other ranks' median, 62% of it outside
//   DDP (data loading, the optimizer?)
//
// DistributedDataParallel::straggler_report() (ddp/torch/distributed_data_parallel.h) makes one
// from every rank's times since its previous call. Pure types and functions: no LibTorch here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ddp {

// One rank's totals over some synchronized steps (seconds).
struct RankStepTimes {
  int rank = 0;
  std::string host;
  std::int64_t steps = 0;  // synchronized backward passes
  double forward = 0;
  double backward = 0;
  double bucket_wait = 0;  // at the end of backward, for the buckets' communication
  double outside = 0;      // between a backward's end and the next forward (data loading, the optimizer)

  // The rank's own time (all but the wait), per step; 0 without steps.
  double own_per_step() const;
};

struct StragglerReport {
  std::vector<RankStepTimes> ranks;  // by rank
  std::int64_t steps = 0;            // the fewest steps any rank timed (the same on every rank in a synchronous job)
  int straggler = -1;                // the rank with the largest own time per step; -1 without steps
  double ratio = 0;                  // its own time over the other ranks' median
  std::string part;                  // where it loses the most: "forward", "backward" or "outside DDP"
  double part_share = 0;             // that part's share of its own time
  // A line, e.g. the one at the top of this file; below 1.1x it says the ranks are even.
  std::string text;
};

// The report for these ranks' times (pure). Ranks without steps are left out of the comparison.
StragglerReport make_straggler_report(std::vector<RankStepTimes> ranks);

}  // namespace ddp
