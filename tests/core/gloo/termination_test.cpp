// The explanation a rank gives when Gloo's network thread ends the process (gloo/termination.h);
// Failures.ARingOverflowedByALargerAllReduceEndsTheRankExplainingWhy has it end a real one.
#include "gloo/termination.h"

#include <gtest/gtest.h>

namespace ddp::detail {
namespace {

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(GlooTermination, AnOverflowedReceiveIsExplainedWithItsSizesTheOpsInFlightAndWhatToDo) {
  const std::string text = explain_gloo_termination(
      "[enforce fail at ./gloo/transport/tcp/pair.cc:510] op.preamble.length <= op.nbytes. 4136 vs 1024",
      {"all_reduce #7 (float32 x 256, SUM) in group 'world' on rank 1", "barrier #2 in group 'pairs' on rank 0"});
  for (const char* part :
       {"a peer sent a message of 4136 bytes for a receive of 1024 bytes", "collectives of different sizes or types",
        "in flight on this rank: all_reduce #7 (float32 x 256, SUM) in group 'world' on rank 1; "
        "barrier #2 in group 'pairs' on rank 0",
        "ddp::join", "DDP_DEBUG=1", "pair.cc:510"}) {
    EXPECT_TRUE(has(text, part)) << "missing '" << part << "' in: " << text;
  }
}

TEST(GlooTermination, AnyOtherAssertionIsPassedOnWithTheOpsInFlight) {
  const std::string text = explain_gloo_termination("[enforce fail at pair.cc:99] state_ <= CONNECTED", {});
  EXPECT_TRUE(has(text, "Gloo's network thread ends this process: [enforce fail at pair.cc:99] state_ <= CONNECTED"))
      << text;
  EXPECT_TRUE(has(text, "no operation is in flight on this rank")) << text;
  EXPECT_FALSE(has(text, "different sizes")) << text;
}

}  // namespace
}  // namespace ddp::detail
