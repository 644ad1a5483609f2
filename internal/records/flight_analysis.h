// What the ranks' flight-recorder dumps say happened, in a few lines: the first sequence number
// at which the ranks of a group part ways, who was missing there, who called a different op,
// who was slow to arrive. Used by ddp-trace and ddprun's summary. Pure.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "records/flight_dump.h"

namespace ddp::detail {

struct FlightFinding {
  enum class Kind {
    None,        // nothing went wrong in what was recorded
    Mismatch,    // ranks called different collectives at `seq`; `ranks` called the odd one(s) out
                 // (every rank that took part, when no op has a majority)
    NotReached,  // `ranks` wrote dumps but never called `seq`, which the others did
    NoDump,      // `ranks` left no dump (killed, or stopped before they could write one), and
                 // `seq` is the first collective the others did not finish
    Stuck,       // every rank reached `seq` and it did not finish; `ranks`: the last to arrive
  };
  Kind kind = Kind::None;
  std::string group;
  std::uint64_t seq = 0;
  std::vector<int> ranks;  // global ranks
};

struct FlightReport {
  FlightFinding finding;           // the first thing that went wrong
  std::vector<std::string> lines;  // for a person: what happened, then the verdict
};

// `dumps`: at most one per rank, of one run (see flight/dump_files.h). `elsewhere`: ranks whose
// dumps are not expected among them (another node's, which ddprun cannot see): their absence is
// no evidence.
FlightReport analyze(const std::vector<FlightDump>& dumps, const std::vector<int>& elsewhere = {});

}  // namespace ddp::detail
