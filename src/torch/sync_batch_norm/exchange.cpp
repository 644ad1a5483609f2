#include "sync_batch_norm/exchange.h"

#include <ATen/ATen.h>

#include "ddp/torch/collectives.h"
#include "join/running_join.h"

namespace ddp::detail {
namespace {

// The tag of SyncBatchNorm's point-to-point messages; between two ranks they match in issue order.
constexpr int kTag = 0x5342;

}  // namespace

StatsExchange::StatsExchange(std::shared_ptr<ProcessGroup> group)
    : group_(std::move(group)), members_(members_still_training(*group_)) {}

at::Tensor StatsExchange::all_gather(const at::Tensor& mine) const {
  const at::Tensor in = mine.contiguous();
  if (!members_) {
    at::Tensor out = at::empty({group_->size() * in.numel()}, in.options());
    ddp::all_gather_into_tensor(out, in, group_);
    return out.view({group_->size(), in.numel()});
  }
  const int me = group_->rank();
  std::vector<at::Tensor> rows;
  std::vector<std::shared_ptr<Work>> works;
  for (int peer : *members_) {
    if (peer == me) {
      rows.push_back(in);
      continue;
    }
    rows.push_back(at::empty_like(in));
    works.push_back(irecv(rows.back(), peer, group_, kTag));
    works.push_back(isend(in, peer, group_, kTag));
  }
  for (auto& work : works) work->wait();
  return at::stack(rows);
}

at::Tensor StatsExchange::all_reduce(const at::Tensor& mine) const {
  if (members_) return all_gather(mine).sum(0);  // the same rows in the same order everywhere
  at::Tensor sum = mine.contiguous().clone();
  ddp::all_reduce(sum, ReduceOp::SUM, group_);
  return sum;
}

}  // namespace ddp::detail
