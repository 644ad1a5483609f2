// Who takes part in one SyncBatchNorm exchange, and how it travels: every rank of the group, with
// the group's collectives; or, inside a join while some ranks have run out of inputs, only the
// ranks still training, point to point among them (the others would contribute nothing).
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <optional>
#include <vector>

#include "ddp/process_group.h"

namespace ddp::detail {

class StatsExchange {
 public:
  // The participants of this iteration, read from the running join (if any).
  explicit StatsExchange(std::shared_ptr<ProcessGroup> group);

  // Every participant's `mine` (a 1-d tensor of the same size on each), in group rank order:
  // [participants, n].
  at::Tensor all_gather(const at::Tensor& mine) const;
  // The sum over the participants, the same bits on every one of them.
  at::Tensor all_reduce(const at::Tensor& mine) const;

 private:
  std::shared_ptr<ProcessGroup> group_;
  std::optional<std::vector<int>> members_;  // group ranks taking part; nullopt: all
};

}  // namespace ddp::detail
