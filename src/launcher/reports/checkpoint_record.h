// How ddprun learns a job's last checkpoint, to say where a stopped job can resume from. Each
// worker gets DDP_CHECKPOINT_RECORD, the path of a file of its own in a folder ddprun makes; a
// program writes it after every checkpoint it saves (ddp::Checkpoints does, on rank 0; any other
// program may), replacing it atomically, as lines "step=N" and "path=FILE". A program that writes
// none gets the stop report without a step.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ddp::launcher {

inline const std::string kCheckpointRecordVariable = "DDP_CHECKPOINT_RECORD";
// The same for the last straggler report (DistributedDataParallel::straggler_report() writes its
// line there on rank 0), which ddprun's reports end with.
inline const std::string kStragglerReportVariable = "DDP_STRAGGLER_REPORT";

struct CheckpointRecord {
  std::int64_t step = 0;
  std::string path;  // may be empty
  int rank = -1;     // the worker that wrote it
};

// Pure: the record in `text`. Throws ddp::Error saying what is wrong when it has no valid step.
CheckpointRecord parse_checkpoint_record(std::string_view text);

// The folder of one ddprun's records: made at construction (under $TMPDIR, else /tmp), removed
// with its files at destruction. Throws ddp::IOError when it cannot be made.
class CheckpointRecords {
 public:
  CheckpointRecords();
  ~CheckpointRecords();
  CheckpointRecords(const CheckpointRecords&) = delete;
  CheckpointRecords& operator=(const CheckpointRecords&) = delete;

  // The file worker `rank` records its checkpoints in.
  std::string path_for(int rank) const;

  // The newest (highest step) record of `ranks`; nullopt when none wrote one. A record that
  // cannot be read is skipped with a line in `problems` naming it and why.
  std::optional<CheckpointRecord> latest(const std::vector<int>& ranks, std::vector<std::string>& problems) const;

  // The file the job's last straggler report goes to, and its line (empty when there is none).
  std::string straggler_path() const;
  std::string last_straggler_report() const;

 private:
  std::string folder_;
};

}  // namespace ddp::launcher
