// Every variable the LibTorch front declares, for README's table (tests/torch/variables_test.cpp).
#include "front_variables.h"

#include "checkpoint_variables.h"
#include "reducer/ddp_variables.h"

namespace ddp::detail {

std::vector<VariableInfo> front_variables() {
  auto all = infos_of(kDdpVariables);
  const auto checkpoints = infos_of(kCheckpointVariables);
  all.insert(all.end(), checkpoints.begin(), checkpoints.end());
  return all;
}

}  // namespace ddp::detail
