#include "flags.h"

#include <functional>
#include <map>
#include <stdexcept>

namespace {

std::int64_t to_int(const std::string& flag, const std::string& value, std::int64_t min) {
  std::size_t used = 0;
  std::int64_t n = 0;
  try {
    n = std::stoll(value, &used);
  } catch (...) {
    used = 0;
  }
  if (used != value.size() || value.empty() || n < min) {
    throw std::invalid_argument(flag + " takes an integer >= " + std::to_string(min) + ", not '" + value + "'");
  }
  return n;
}

double to_double(const std::string& flag, const std::string& value) {
  std::size_t used = 0;
  double x = 0;
  try {
    x = std::stod(value, &used);
  } catch (...) {
    used = 0;
  }
  if (used != value.size() || value.empty() || !(x > 0)) {
    throw std::invalid_argument(flag + " takes a positive number, not '" + value + "'");
  }
  return x;
}

}  // namespace

Flags parse_flags(const std::vector<std::string>& args) {
  Flags f;
  using Setter = std::function<void(const std::string&, const std::string&)>;
  const std::map<std::string, Setter> with_value =
      {
          {"--epochs", [&](auto& k, auto& v) { f.epochs = static_cast<int>(to_int(k, v, 1)); }},
          {"--batch-size", [&](auto& k, auto& v) { f.batch_size = static_cast<int>(to_int(k, v, 1)); }},
          {"--lr", [&](auto& k, auto& v) { f.lr = to_double(k, v); }},
          {"--accum", [&](auto& k, auto& v) { f.accum = static_cast<int>(to_int(k, v, 1)); }},
          {"--data-dir", [&](auto&, auto& v) { f.data_dir = v; }},
          {"--checkpoint-dir", [&](auto&, auto& v) { f.checkpoint_dir = v; }},
          {"--out-dir", [&](auto&, auto& v) { f.out_dir = v; }},
          {"--init-from", [&](auto&, auto& v) { f.init_from = v; }},
          {"--seed", [&](auto& k, auto& v) { f.seed = static_cast<std::uint64_t>(to_int(k, v, 0)); }},
          {"--backend",
           [&](auto& k, auto& v) {
    if (v != "gloo" && v != "nccl") throw std::invalid_argument(k + " is gloo or nccl, not '" + v + "'");
    f.backend = v;
           }},
          {"--checkpoint-every", [&](auto& k, auto& v) { f.checkpoint_every = static_cast<int>(to_int(k, v, 1)); }},
          {"--log-every", [&](auto& k, auto& v) { f.log_every = static_cast<int>(to_int(k, v, 1)); }},
          {"--limit-train", [&](auto& k, auto& v) { f.limit_train = to_int(k, v, 0); }},
          {"--limit-test", [&](auto& k, auto& v) { f.limit_test = to_int(k, v, 0); }},
          {"--stop-after", [&](auto& k, auto& v) { f.stop_after = to_int(k, v, 1); }},
          {"--timeout", [&](auto& k, auto& v) { f.timeout = to_double(k, v); }},
          {"--sample-log", [&](auto&, auto& v) { f.sample_log = v; }},
  };
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string key = args[i], value;
    const auto eq = key.find('=');
    const bool inline_value = key.rfind("--", 0) == 0 && eq != std::string::npos;
    if (inline_value) {
      value = key.substr(eq + 1);
      key = key.substr(0, eq);
    }
    if (key == "--help" || key == "-h") {
      f.help = true;
    } else if (key == "--resume") {
      f.resume = true;
    } else if (key == "--no-resume") {
      f.resume = false;
    } else if (key == "--amp") {
      f.amp = true;
    } else if (key == "--sync-bn") {
      f.sync_bn = true;
    } else if (auto it = with_value.find(key); it != with_value.end()) {
      if (!inline_value) {
        if (i + 1 >= args.size()) throw std::invalid_argument(key + " needs a value");
        value = args[++i];
      }
      it->second(key, value);
    } else {
      throw std::invalid_argument("unknown flag '" + args[i] + "' (see --help)");
    }
  }
  if (f.out_dir.empty()) f.out_dir = f.checkpoint_dir;
  return f;
}

std::string help_text(const std::string& program) {
  return "Trains a CNN on Fashion-MNIST with DistributedDataParallel, one process per device.\n\n"
         "  ddprun --nproc_per_node=2 " +
         program +
         " [flags]\n\n"
         "  --epochs N            epochs to train (default 3)\n"
         "  --batch-size N        batch size per rank (default 64)\n"
         "  --lr X                peak learning rate of SGD with momentum 0.9, cosine decay (default 0.05)\n"
         "  --accum K             accumulate K micro-batches per step, synchronizing only the last (default 1)\n"
         "  --data-dir DIR        Fashion-MNIST's gzip'd IDX files (default /usr/share/datasets/fashion-mnist,\n"
         "                        from Debian's dataset-fashion-mnist)\n"
         "  --checkpoint-dir DIR  checkpoints; the newest is resumed automatically (default ./checkpoints)\n"
         "  --out-dir DIR         where metrics.csv, metrics.svg and the trained model (model.pt, model.safetensors)\n"
         "                        go (default: the checkpoint directory)\n"
         "  --init-from PATH      start from the weights in PATH: a state dict from Python (torch.save or\n"
         "                        safetensors, for net.py's Net) or an earlier run's model.pt (a checkpoint to resume\n"
         "                        comes first)\n"
         "  --resume              continue from the newest checkpoint (the default)\n"
         "  --no-resume           start afresh even if checkpoints exist\n"
         "  --amp                 mixed precision: bfloat16 autocast on the CPU; float16 autocast with a GradScaler\n"
         "                        on CUDA (default: float32)\n"
         "  --seed N              seed of the model's initialization and the data order (default 0)\n"
         "  --backend NAME        gloo, nccl or cpu:gloo,cuda:nccl (default: cpu:gloo,cuda:nccl when CUDA is\n"
         "                        available, else gloo)\n"
         "  --checkpoint-every N  optimizer steps between checkpoints; one is also written every epoch (default 200)\n"
         "  --log-every N         optimizer steps between progress updates (default 20)\n"
         "  --limit-train N       train on the first N images only (default: all 60,000)\n"
         "  --limit-test N        test on the first N images only (default: all 10,000)\n"
         "  --stop-after N        stop after N optimizer steps, with a checkpoint (to try resuming)\n"
         "  --timeout SECONDS     how long a collective may wait for the other ranks before the job fails\n"
         "                        with an explanation (default 1800, as PyTorch's 30 minutes)\n"
         "  --sample-log DIR      each rank appends the ids of the samples it trains on to\n"
         "                        DIR/round-<TORCHELASTIC_RESTART_COUNT>-rank-<RANK>.ids, a line per batch:\n"
         "                        \"EPOCH STEP: ID ID ...\" (0-based epoch, the optimizer step it is part of)\n"
         "  --sync-bn             synchronize batch norm over the ranks (ddp::SyncBatchNorm): each rank normalizes\n"
         "                        with the statistics of every rank's batch, as one process would on them all\n"
         "  --help                this text\n";
}
