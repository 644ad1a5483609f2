// A dump's file: writing it whole, and finding and reading the dumps of one run (the *.flight files
// of a folder, or files named one by one, the newest run's only). Reading a dump is bounded by its
// file's real size (records/flight_dump.h).
#pragma once

#include <string>
#include <vector>

#include "records/flight_dump.h"

namespace ddp::detail {

// Writes `text` to `path` in folder `dir` (made when missing): a temporary file, then a rename, so
// that a reader sees a whole dump or the previous one. Throws IOError naming the folder or file.
void write_dump_file(const std::string& dir, const std::string& path, const std::string& text);

struct LoadedDumps {
  std::vector<FlightDump> dumps;      // one per rank, of the run with the newest dump, by rank
  std::vector<std::string> problems;  // files that could not be read: each message names its file and the fault
  std::vector<std::string> ignored;   // dumps of other runs (another job id or attempt), and of a rank twice
  std::size_t files = 0;              // dump files found
};

// `paths`: folders (every *.flight file in them, not below) and files. A path that does not exist
// is a problem, not an exception.
LoadedDumps load_dumps(const std::vector<std::string>& paths);

}  // namespace ddp::detail
