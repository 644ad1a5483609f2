// Checkpoints that a crash cannot destroy: rank 0 writes a new checkpoint to a temporary file,
// flushes it to disk, renames it into place and keeps the newest few; every rank then meets at a
// barrier (the lesson's "save on rank 0, then barrier"). Each file carries its length and a
// CRC-32, so a truncated or damaged checkpoint is recognised, reported by name, and passed over
// for the next older one.
//
//   ddp::Checkpoints checkpoints({.directory = "ckpt", .keep = 2});
//   checkpoints.save(step, [&](torch::serialize::OutputArchive& archive) {
//     torch::serialize::OutputArchive m; model->save(m); archive.write("model", m);
//     archive.write("step", c10::IValue(step));
//   });
//   if (auto loaded = checkpoints.load_latest([&](torch::serialize::InputArchive& archive) { ... })) {
//     std::cout << "resumed from " << loaded->path;
//   }
#pragma once

#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ddp/process_group.h"

namespace ddp {

struct CheckpointOptions {
  std::string directory;              // created if missing
  int keep = 2;                       // how many of the newest checkpoints stay on disk
  std::string prefix = "checkpoint";  // files are <prefix>-<step, 12 digits>.ckpt
};

struct LoadedCheckpoint {
  std::string path;
  std::int64_t step = 0;
  std::vector<std::string> skipped;  // newer checkpoints that could not be read, with the reason
};

class Checkpoints {
 public:
  // Throws InvalidArgument for an empty directory or keep < 1.
  explicit Checkpoints(CheckpointOptions options);

  // Collective over `group` (default: the default group, or none when not initialized): rank 0
  // serializes with `write`, writes <dir>/<prefix>-<step>.ckpt through a temporary file, fsync
  // and rename, and removes all but the newest `keep`; then every rank waits at a barrier, so
  // that after save() returns the checkpoint is on disk for everyone. Returns the path. Under
  // ddprun, rank 0 also writes "step=N" and "path=FILE" to the file DDP_CHECKPOINT_RECORD names,
  // so that a stopped job's report says where it resumes from (a failure there is only logged).
  // Throws IOError naming the file when it cannot be written (the previous checkpoints stay).
  std::string save(std::int64_t step, const std::function<void(torch::serialize::OutputArchive&)>& write,
                   const std::shared_ptr<ProcessGroup>& group = nullptr);

  // Reads the newest checkpoint that is usable, newest first: a file that is truncated or
  // damaged (or for which `read` throws IOError), or whose entries LibTorch's reader does not find
  // as `read` asks (a c10::Error), is logged as an error naming it and the next older one is
  // tried. Any other exception from `read` (a refusal: an InvalidArgument about another batch
  // size, say) is thrown as it is: an older file would be refused alike, and it is intact.
  // Returns nullopt when there is no checkpoint; throws IOError naming every file when there are
  // checkpoints but none is usable (advising deletion only of the damaged ones). Not collective:
  // each rank reads the files itself.
  std::optional<LoadedCheckpoint> load_latest(const std::function<void(torch::serialize::InputArchive&)>& read) const;

  // Checkpoint files in the directory, newest (highest step) first.
  std::vector<std::string> list() const;

  const CheckpointOptions& options() const { return options_; }

 private:
  void remove_stale_temporaries() const;
  CheckpointOptions options_;
};

// Writes `payload` to `path` atomically (temporary file in the same directory, fsync, rename,
// fsync of the directory). Throws IOError naming the path.
void write_file_atomically(const std::string& path, const std::string& payload);

}  // namespace ddp
