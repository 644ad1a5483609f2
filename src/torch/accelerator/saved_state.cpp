// Accelerator::save_state/load_state and save_model: checkpoints of everything prepare() took
// (models, optimizers, the scaler, loader positions, every rank's generators), written by the main
// process with every rank told the outcome, and read by every rank.
#include <ATen/Context.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "accelerator/state.h"
#include "ddp/distributed.h"
#include "ddp/error.h"
#include "ddp/torch/checkpoint.h"
#include "ddp/torch/collectives.h"
#include "ddp/torch/state_dict.h"
#include "util/strings.h"

namespace ddp {

namespace {

// Rank 0's text, on every rank (at most 4 KiB).
std::string broadcast_text(const std::string& text, int rank) {
  constexpr std::int64_t kSize = 4096;
  auto buffer = at::zeros({kSize}, at::kByte);
  if (rank == 0) std::memcpy(buffer.data_ptr(), text.data(), std::min<std::size_t>(text.size(), kSize - 1));
  buffer = buffer.to(collective_device());
  broadcast(buffer, 0);
  buffer = buffer.cpu();
  return std::string(static_cast<const char*>(buffer.data_ptr()));
}

// Collective: every rank passed the same directory, the one the main process writes.
void check_same_directory(const char* caller, const std::string& dir, int rank, int world) {
  if (world == 1) return;
  auto all = at::empty({world}, at::kLong).to(collective_device());
  all_gather_into_tensor(
      all, at::full({1}, static_cast<std::int64_t>(detail::fnv1a(dir)), at::kLong).to(collective_device()));
  all = all.cpu();
  std::string differing;
  for (int r = 1; r < world; ++r) {
    if (all[r].item<std::int64_t>() != all[0].item<std::int64_t>())
      differing += (differing.empty() ? "" : ", ") + std::to_string(r);
  }
  if (differing.empty()) return;
  const std::string main_dir = broadcast_text(dir, rank);
  throw InvalidArgument(std::string(caller) + ": rank(s) " + differing +
                        " passed another directory than the main "
                        "process's '" +
                        main_dir + "'" + (rank == 0 ? "" : " (this rank: '" + dir + "')") +
                        "; only the main process writes, so every rank must pass the same directory (with several "
                        "nodes, one on a file system they share)");
}

// ddp's errors as they are (a refusal keeps its type and its advice); LibTorch's as an IOError.
[[noreturn]] void rethrow_as_error(const std::exception_ptr& failure) {
  try {
    std::rethrow_exception(failure);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw IOError(e.what());
  }
}

// Collective: rank 0's failure (or success) becomes every rank's.
void agree_on_outcome(std::exception_ptr failure, const std::string& what, int rank, int world) {
  std::string message;
  if (failure) {
    try {
      std::rethrow_exception(failure);
    } catch (const std::exception& e) {
      message = e.what();
    }
  }
  if (world > 1) message = broadcast_text(message, rank);
  if (rank == 0 && failure) std::rethrow_exception(failure);
  if (!message.empty()) throw IOError(what + " failed on the main process (rank 0): " + message);
}

torch::serialize::OutputArchive loader_archive(const detail::LoaderPosition& p) {
  auto s = p.sampler.state();
  std::int64_t epoch = s.epoch, consumed = std::min<std::int64_t>(p.batches_done * p.batch_size,
                                                                  static_cast<std::int64_t>(p.sampler.pass_size()));
  if (p.resumed) {  // restored and not iterated since: the restored position as it is
    consumed = s.consumed;
  } else if (p.batches_done == 0 ||
             p.batches_done >= p.batches_in_pass) {  // between passes: the next epoch from its start
    epoch = p.epoch + (p.batches_done > 0 ? 1 : 0);
    consumed = 0;
    s.start = 0;
  }
  torch::serialize::OutputArchive a;
  a.write("epoch", c10::IValue(epoch));
  a.write("seed", c10::IValue(static_cast<std::int64_t>(s.seed)));
  a.write("consumed", c10::IValue(consumed));
  a.write("start", c10::IValue(s.start));
  a.write("dataset_size", c10::IValue(s.dataset_size));
  a.write("num_replicas", c10::IValue(static_cast<std::int64_t>(s.num_replicas)));
  a.write("batches_done", c10::IValue(consumed == 0 ? std::int64_t{0} : p.batches_done));  // of this world size's pass
  a.write("batch_size", c10::IValue(p.batch_size));
  return a;
}

void restore_loader(detail::LoaderPosition& p, torch::serialize::InputArchive& a, std::size_t index) {
  auto read = [&](const char* key) {
    c10::IValue v;
    a.read(key, v);
    return v.toInt();
  };
  if (read("batch_size") != p.batch_size) {
    throw InvalidArgument("Accelerator::load_state: loader " + std::to_string(index) + " was saved with batch_size " +
                          std::to_string(read("batch_size")) + ", this one has " + std::to_string(p.batch_size) +
                          "; resume with the same batch size (prepare the loader with .batch_size = " +
                          std::to_string(read("batch_size")) + ")");
  }
  DistributedSamplerState s;
  s.epoch = read("epoch");
  s.seed = static_cast<std::uint64_t>(read("seed"));
  s.consumed = read("consumed");
  s.start = read("start");
  s.dataset_size = read("dataset_size");
  s.num_replicas = static_cast<int>(read("num_replicas"));
  p.epoch = s.epoch;
  p.batches_done = 0;
  p.resumed = false;
  if (s.consumed > 0) {  // mid-epoch: the sampler continues it (at another world size, a new pass over the rest)
    p.sampler.set_state(s);
    p.resumed = true;
    if (s.num_replicas == p.sampler.num_replicas()) p.batches_done = read("batches_done");
  }
}

at::Generator device_generator(const c10::Device& device) { return at::globalContext().defaultGenerator(device); }

// Every rank's generator state ([world, bytes]) gathered over the group.
at::Tensor gather_generator(const c10::Device& device, int world) {
  auto state = device_generator(device).get_state().contiguous();
  if (world == 1) return state.unsqueeze(0);
  auto all = at::empty({world * state.numel()}, at::kByte).to(collective_device());
  all_gather_into_tensor(all, state.to(collective_device()));
  return all.cpu().view({world, state.numel()});
}

}  // namespace

void Accelerator::save_state(const std::string& dir,
                             const std::function<void(torch::serialize::OutputArchive&)>& extra) {
  auto& s = *state_;
  check_same_directory("Accelerator::save_state", dir, s.rank, s.world);
  const auto cpu_rng = gather_generator(c10::Device(c10::kCPU), s.world);
  const auto cuda_rng = s.device.is_cuda() ? gather_generator(s.device, s.world) : at::Tensor();
  Checkpoints checkpoints({.directory = dir, .keep = 2, .prefix = "state"});
  std::exception_ptr failure;
  try {
    checkpoints.save(s.steps, [&](torch::serialize::OutputArchive& archive) {
      archive.write("world_size", c10::IValue(static_cast<std::int64_t>(s.world)));
      archive.write("steps", c10::IValue(s.steps));
      archive.write("micro_step", c10::IValue(s.micro_step));
      for (std::size_t i = 0; i < s.models.size(); ++i) {
        torch::serialize::OutputArchive a;
        s.models[i]->save(a);
        archive.write("model_" + std::to_string(i), a);
      }
      for (std::size_t i = 0; i < s.optimizers.size(); ++i) {
        torch::serialize::OutputArchive a;
        s.optimizers[i]->save(a);
        archive.write("optimizer_" + std::to_string(i), a);
      }
      torch::serialize::OutputArchive scaler;
      s.scaler.save(scaler);
      archive.write("scaler", scaler);
      for (std::size_t i = 0; i < s.loaders.size(); ++i) {
        auto a = loader_archive(*s.loaders[i]);
        archive.write("loader_" + std::to_string(i), a);
      }
      archive.write("rng_cpu", cpu_rng);
      if (cuda_rng.defined()) archive.write("rng_cuda", cuda_rng);
      if (extra) {
        torch::serialize::OutputArchive a;
        extra(a);
        archive.write("extra", a);
      }
    });
  } catch (...) {
    failure = std::current_exception();
  }
  agree_on_outcome(failure, "Accelerator::save_state(\"" + dir + "\")", s.rank, s.world);
}

void Accelerator::load_state(const std::string& dir,
                             const std::function<void(torch::serialize::InputArchive&)>& extra) {
  auto& s = *state_;
  Checkpoints checkpoints({.directory = dir, .keep = 2, .prefix = "state"});
  std::exception_ptr failure;
  try {
    auto loaded = checkpoints.load_latest([&](torch::serialize::InputArchive& archive) {
      c10::IValue v;
      archive.read("steps", v);
      s.steps = v.toInt();
      archive.read("micro_step", v);
      s.micro_step = v.toInt();
      for (std::size_t i = 0; i < s.models.size(); ++i) {
        torch::serialize::InputArchive a;
        archive.read("model_" + std::to_string(i), a);
        s.models[i]->load(a);
        s.models[i]->to(s.device);
      }
      for (std::size_t i = 0; i < s.optimizers.size(); ++i) {
        torch::serialize::InputArchive a;
        archive.read("optimizer_" + std::to_string(i), a);
        s.optimizers[i]->load(a);
      }
      torch::serialize::InputArchive scaler;
      c10::IValue scale;
      if (archive.try_read("scaler", scaler) && scaler.try_read("scale", scale)) s.scaler.load(scaler);
      for (std::size_t i = 0; i < s.loaders.size(); ++i) {
        torch::serialize::InputArchive a;
        archive.read("loader_" + std::to_string(i), a);
        restore_loader(*s.loaders[i], a, i);
      }
      at::Tensor rng;
      archive.read("rng_cpu", rng);
      // A row of its own (clone): LibTorch 2.15's set_state crashed (SIGSEGV) on rank 1's row, a
      // view at an offset into the gathered tensor's storage; 1.13 took it.
      device_generator(c10::Device(c10::kCPU)).set_state(rng[s.rank % rng.size(0)].clone());
      if (s.device.is_cuda() && archive.try_read("rng_cuda", rng)) {
        device_generator(s.device).set_state(rng[s.rank % rng.size(0)].clone());
      }
      if (extra) {
        torch::serialize::InputArchive a;
        archive.read("extra", a);
        extra(a);
      }
    });
    if (!loaded) {
      throw IOError("Accelerator::load_state: " + dir + " holds no checkpoint (" + checkpoints.options().prefix +
                    "-*.ckpt); save_state(\"" + dir + "\") writes one");
    }
  } catch (...) {
    failure = std::current_exception();  // as it is: a refusal (InvalidArgument) names its fix
  }
  // Every rank learns whether any could not load, so that none trains on alone.
  if (s.world > 1) {
    auto failed = at::full({1}, failure ? s.rank + 1 : 0, at::kInt).to(collective_device());
    all_reduce(failed, ReduceOp::MAX);
    const int first = failed.cpu().item<int>();
    if (first > 0 && !failure) {
      throw IOError("Accelerator::load_state(\"" + dir + "\"): rank " + std::to_string(first - 1) +
                    " could not load the checkpoint (its error says why; every rank reads " + dir + " itself)");
    }
  }
  if (failure) rethrow_as_error(failure);
  s.sync_gradients = true;
  s.in_accumulate = false;
}

void Accelerator::save_module(const torch::nn::Module& module, const std::string& dir) {
  auto& s = *state_;
  check_same_directory("Accelerator::save_model", dir, s.rank, s.world);
  std::exception_ptr failure;
  if (s.rank == 0) {
    try {
      std::filesystem::create_directories(dir);
      save_state_dict(module, dir + "/model.safetensors",
                      {.format = WeightsFormat::SafeTensors, .metadata = {{"format", "pt"}}});
    } catch (...) {
      failure = std::current_exception();
    }
  }
  agree_on_outcome(failure, "Accelerator::save_model(\"" + dir + "\")", s.rank, s.world);
}

}  // namespace ddp
