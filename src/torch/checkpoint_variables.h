// Checkpoints' variable: where ranks record each checkpoint they write, for the launcher's stop
// report ("resume from"). Read from the group's variables (ProcessGroupOptions::variables over
// the process's environment), or the process's without a group.
#pragma once

#include <string>

#include "util/variables.h"

namespace ddp::detail {

struct CheckpointSettings {
  std::string record;  // "": not under ddprun
};

inline constexpr Variable<CheckpointSettings> kCheckpointVariables[] = {
    {"DDP_CHECKPOINT_RECORD", "set by ddprun: where ranks record their checkpoints",
     read_text<CheckpointSettings, &CheckpointSettings::record>},
};

}  // namespace ddp::detail
