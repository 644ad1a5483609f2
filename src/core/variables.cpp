// Every variable the core declares, for README's table (tests/torch/variables_test.cpp).
#include "ddp/detail/variables.h"

#include "ddp/detail/flight_config.h"
#include "ddp/detail/log.h"
#include "gloo/tuning.h"
#include "group/execute.h"
#include "shm/tuning.h"
#include "store/store_variables.h"

namespace ddp::detail {

std::vector<VariableInfo> core_variables() {
  std::vector<VariableInfo> all;
  for (auto part : {infos_of(kLogVariables), infos_of(kDebugVariables), infos_of(kStoreVariables),
                    infos_of(kFlightVariables), infos_of(shm::kShmVariables), infos_of(kGlooVariables)}) {
    all.insert(all.end(), part.begin(), part.end());
  }
  return all;
}

}  // namespace ddp::detail
