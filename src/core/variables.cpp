// Every variable the core declares, for README's table (tests/torch/variables_test.cpp).
#include "util/variables.h"

#include "backends/registry.h"
#include "group/execute.h"
#include "records/flight_config.h"
#include "store/store_variables.h"
#include "util/log.h"

namespace ddp::detail {

std::vector<VariableInfo> core_variables() {
  std::vector<VariableInfo> all;
  for (auto part : {infos_of(kLogVariables), infos_of(kDebugVariables), infos_of(kStoreVariables),
                    infos_of(kFlightVariables), builtin_backend_variables()}) {
    all.insert(all.end(), part.begin(), part.end());
  }
  return all;
}

}  // namespace ddp::detail
