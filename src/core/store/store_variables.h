// The stores' variables: the job id a client checks against its server's, and which protocol
// the launcher's store speaks.
#pragma once

#include <string>

#include "util/variables.h"

namespace ddp::detail {

struct StoreSettings {
  std::string job_id;    // "": none (default_job_id)
  std::string protocol;  // "": torch (agent_store_protocol)
};

inline constexpr Variable<StoreSettings> kStoreVariables[] = {
    {"DDP_JOB_ID", "the job id a store checks (or TORCHELASTIC_RUN_ID)",
     read_text<StoreSettings, &StoreSettings::job_id>, "TORCHELASTIC_RUN_ID"},
    {"DDP_STORE_PROTOCOL", "ddp or torch: the launcher's store", read_text<StoreSettings, &StoreSettings::protocol>},
};

// The process's store settings (its environment, now).
inline StoreSettings process_store_settings() {
  VariableProblems ignored;  // text values: nothing to warn about
  return read_variables(kStoreVariables, process_env(), ignored);
}

}  // namespace ddp::detail
