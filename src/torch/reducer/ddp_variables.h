// DistributedDataParallel's variables, read from its group's variables
// (ProcessGroupOptions::variables over the process's environment) as it is constructed.
#pragma once

#include <string>

#include "util/variables.h"

namespace ddp::detail {

struct DdpSettings {
  std::string timeline;          // DDP_TIMELINE: path-{rank}.json, "" none (reducer/timeline.h)
  int bucket_streams = 2;        // DDP_BUCKET_STREAMS: 1 or 2 (the group's least holds)
  std::string straggler_report;  // DDP_STRAGGLER_REPORT: set by ddprun; "" none
};

inline constexpr Variable<DdpSettings> kDdpVariables[] = {
    {"DDP_TIMELINE", "path-{rank}.json: a Chrome trace of each DDP step",
     read_text<DdpSettings, &DdpSettings::timeline>},
    {"DDP_BUCKET_STREAMS", "2 (default): two DDP buckets in flight where no two ranks share a host; 1: one",
     read_integer<DdpSettings, &DdpSettings::bucket_streams, 1, 2>},
    {"DDP_STRAGGLER_REPORT", "set by ddprun: where rank 0 writes the straggler report",
     read_text<DdpSettings, &DdpSettings::straggler_report>},
};

}  // namespace ddp::detail
