// The training example's command line.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

struct Flags {
  int epochs = 3;
  int batch_size = 64;  // per rank
  double lr = 0.05;     // peak learning rate (SGD, momentum 0.9, cosine decay)
  int accum = 1;        // micro-batches per optimizer step (no_sync on all but the last)
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  std::string checkpoint_dir = "checkpoints";
  std::string out_dir;  // metrics.csv and metrics.svg; default: checkpoint_dir
  std::uint64_t seed = 0;
  std::string backend;           // "", "gloo" or "nccl"
  bool resume = true;            // continue from the newest checkpoint in checkpoint_dir
  std::string init_from;         // start from this state dict (PyTorch's format or safetensors)
  bool amp = false;              // mixed precision: bf16 autocast on the CPU, fp16 autocast and GradScaler on CUDA
  int checkpoint_every = 200;    // optimizer steps between checkpoints (and at every epoch end)
  int log_every = 20;            // optimizer steps between loss reductions (and progress updates)
  std::int64_t limit_train = 0;  // use only the first N training images (0: all)
  std::int64_t limit_test = 0;   // use only the first N test images (0: all)
  std::int64_t stop_after = 0;   // stop (with a checkpoint) after this many optimizer steps in total
  double timeout = 1800;         // seconds any collective may take before the job fails with an explanation
  std::string sample_log;        // a folder: each rank appends the ids of the samples it trains on
  bool sync_bn = false;          // SyncBatchNorm: batch statistics over every rank's batch
  bool help = false;
};

// Parses argv; throws std::invalid_argument with a message naming the flag.
Flags parse_flags(const std::vector<std::string>& args);

std::string help_text(const std::string& program);
