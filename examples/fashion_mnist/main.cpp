// Distributed training on Fashion-MNIST, step by step as PyTorch's DDP lesson teaches it:
// join the process group, pin the device from LOCAL_RANK, wrap the model in
// DistributedDataParallel, shard the data with DistributedSampler (set_epoch every epoch), let
// backward all-reduce the gradients, save checkpoints on rank 0 and meet at a barrier; at the end,
// the trained weights in PyTorch's format and as safetensors, for Python.
//
//   ddprun --nproc_per_node=2 build/examples/train_fashion_mnist --epochs 3
#include <torch/torch.h>

#include <csignal>
#include <cmath>
#include <fstream>
#include <iostream>

#include "ddp/ddp.h"
#include "ddp/torch/checkpoint.h"
#include "ddp/torch/data/fashion_mnist.h"
#include "ddp/torch/distributed_sampler.h"
#include "flags.h"
#include "loss_sums.h"
#include "metrics.h"
#include "net.h"
#include "plot.h"
#include "progress.h"

namespace {

volatile std::sig_atomic_t stop_requested = 0;  // SIGINT/SIGTERM: stop at the next step, with a checkpoint

// Cosine decay from the peak learning rate to 5% of it over the whole run: a pure function of
// the training samples the whole job has consumed, so resuming needs no scheduler state, and a run
// resumed at another world size (other batches per step) follows the same curve.
double learning_rate(const Flags& f, std::int64_t samples, std::int64_t total_samples) {
  const double progress =
      std::min(1.0, static_cast<double>(samples) / static_cast<double>(std::max<std::int64_t>(total_samples, 1)));
  return f.lr * (0.05 + 0.95 * 0.5 * (1 + std::cos(M_PI * progress)));
}

void set_lr(torch::optim::SGD& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) static_cast<torch::optim::SGDOptions&>(group.options()).lr(lr);
}

// Sums over every rank: what is printed is about the whole job, not one shard. On the group's
// collective device: the CPU with gloo or "cpu:gloo,cuda:nccl", the GPU with nccl alone.
std::vector<double> sum_over_ranks(std::vector<double> values) {
  auto t = torch::tensor(values, torch::kDouble).to(ddp::collective_device());
  ddp::all_reduce(t);
  t = t.cpu();
  return {t.data_ptr<double>(), t.data_ptr<double>() + t.numel()};
}

struct TestResult {
  double loss = 0, accuracy = 0;
};

// The test set through a DistributedSampler (no shuffle); the padding that evens the shards out
// repeats samples, so padded positions are not counted.
TestResult evaluate(ddp::DistributedDataParallel<NetImpl>& model, const ddp::data::FashionMNIST& test,
                    std::int64_t test_size, torch::Device device) {
  ddp::DistributedSampler sampler(static_cast<std::size_t>(test_size), {.shuffle = false});
  const auto indices = sampler.indices();
  const int world = sampler.num_replicas(), rank = sampler.rank();
  std::vector<std::int64_t> real;
  for (std::size_t k = 0; k < indices.size(); ++k) {
    if (rank + static_cast<std::int64_t>(k) * world < test_size) real.push_back(indices[k]);  // not padding
  }
  torch::NoGradGuard no_grad;
  model->eval();
  double loss_sum = 0, correct = 0;
  auto all = torch::tensor(real, torch::kLong);
  for (std::int64_t start = 0; start < all.numel(); start += 1000) {
    auto idx = all.narrow(0, start, std::min<std::int64_t>(1000, all.numel() - start));
    auto x = test.images().index_select(0, idx).to(device);
    auto y = test.targets().index_select(0, idx).to(device);
    auto logits = model->forward(x);
    loss_sum += torch::cross_entropy_loss(logits, y, {}, at::Reduction::Sum).item<double>();
    correct += logits.argmax(1).eq(y).sum().item<double>();
  }
  model->train();
  auto sums = sum_over_ranks({loss_sum, correct, static_cast<double>(real.size())});
  return {sums[0] / sums[2], sums[1] / sums[2]};
}

void write_text(const std::string& path, const std::string& text) { ddp::write_file_atomically(path, text); }

// A checkpoint's loss sums ([world it was written at, 4]) for this rank: its own row at the same
// world size; at another, rank 0 takes them all (what is reported is their sum over ranks).
LossSums resumed_loss_sums(const at::Tensor& sums, std::int64_t written_world, int world, int rank) {
  if (sums.dim() != 2 || sums.size(0) != written_world || sums.size(1) != 4) {
    throw std::runtime_error("its loss sums are not those of " + std::to_string(written_world) +
                             " ranks; start afresh with --no-resume");
  }
  if (written_world == world) {
    auto row = sums[rank].contiguous();
    return LossSums::from_values({row.data_ptr<double>(), row.data_ptr<double>() + 4});
  }
  if (rank != 0) return {};
  auto total = sums.sum(0).contiguous();
  return LossSums::from_values({total.data_ptr<double>(), total.data_ptr<double>() + 4});
}

// Where --sample-log writes this rank's sample ids: one file per ddprun round (a resumed process).
std::string sample_log_path(const std::string& dir, int rank) {
  const char* round = std::getenv("TORCHELASTIC_RESTART_COUNT");
  return dir + "/round-" + std::string(round && *round ? round : "0") + "-rank-" + std::to_string(rank) + ".ids";
}

// Every rank's loss sums, in rank order ([world, 4]): a checkpoint keeps them all, since each
// rank's share of a mean is its own. Collective.
at::Tensor gather_loss_sums(const LossSums& mine, int world) {
  const auto device = ddp::collective_device();
  auto all = torch::empty({world * 4}, torch::dtype(torch::kDouble).device(device));
  ddp::all_gather_into_tensor(all, torch::tensor(mine.values(), torch::kDouble).to(device));
  return all.cpu().view({world, 4});
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  try {
    flags = parse_flags({argv + 1, argv + argc});
  } catch (const std::invalid_argument& e) {
    std::cerr << argv[0] << ": " << e.what() << "\n";
    return 2;
  }
  if (flags.help) {
    std::cout << help_text(argv[0]);
    return 0;
  }
  std::signal(SIGINT, [](int) { stop_requested = 1; });
  std::signal(SIGTERM, [](int) { stop_requested = 1; });
  try {
    // 1. Join the process group: rank and world size come from the launcher (ddprun, torchrun).
    ddp::init_process_group(flags.backend,
                            {.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(flags.timeout * 1000))});
    const int rank = ddp::get_rank(), world = ddp::get_world_size();
    // 2. One device per process, chosen by LOCAL_RANK.
    const int local_rank = ddp::get_local_rank();
    //    The GPU when the group's backend takes this rank's GPU tensors (nccl, or the default
    //    "cpu:gloo,cuda:nccl" where CUDA is available), else the CPU.
    const ddp::Device gpu{ddp::Device::Type::CUDA, local_rank};
    torch::Device device = torch::cuda::is_available() && ddp::get_default_group()->accepts(gpu)
                               ? torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(local_rank))
                               : torch::Device(torch::kCPU);
    const bool leader = rank == 0;

    ddp::data::FashionMNIST train(flags.data_dir, ddp::data::FashionMNIST::Mode::kTrain);
    ddp::data::FashionMNIST test(flags.data_dir, ddp::data::FashionMNIST::Mode::kTest);
    const auto train_size =
        flags.limit_train ? std::min<std::int64_t>(flags.limit_train, *train.size()) : *train.size();
    const auto test_size = flags.limit_test ? std::min<std::int64_t>(flags.limit_test, *test.size()) : *test.size();

    // 3. The model on its device, wrapped in DistributedDataParallel (it starts from rank 0's weights).
    //    With --sync-bn its batch norm layers are SyncBatchNorm (PyTorch's convert_sync_batchnorm).
    torch::manual_seed(flags.seed);
    Net net(flags.sync_bn);
    net->to(device);
    if (!flags.init_from.empty()) {  // weights from Python or an earlier run; strict: they must be this network's
      const auto report = ddp::load_state_dict(net, flags.init_from);
      if (leader) {
        std::cout << "initialized from " << flags.init_from << " (" << report.format << ", " << report.loaded
                  << " tensors)" << std::endl;
        for (const auto& note : report.notes) std::cout << "  " << note << std::endl;
      }
    }
    ddp::DDPOptions ddp_options;
    if (device.is_cuda()) ddp_options.device_ids = {local_rank};
    ddp::DistributedDataParallel model(net, ddp_options);
    torch::optim::SGD optimizer(model->parameters(),
                                torch::optim::SGDOptions(flags.lr).momentum(0.9).weight_decay(5e-4));
    // --amp: the forward in bfloat16 on the CPU (float32's range: no loss scaling needed), in
    // float16 on CUDA with a GradScaler, so that small gradients do not underflow.
    ddp::amp::GradScaler scaler({.enabled = flags.amp && device.is_cuda()});

    // 4. Each rank reads its own shard; together they cover the training set once per epoch.
    ddp::DistributedSampler sampler(static_cast<std::size_t>(train_size), {.seed = flags.seed});
    auto loader = torch::data::make_data_loader(train.map(torch::data::transforms::Stack<>()), sampler,
                                                torch::data::DataLoaderOptions(flags.batch_size));
    const std::int64_t batches_per_epoch =
        (static_cast<std::int64_t>(sampler.size()) + flags.batch_size - 1) / flags.batch_size;
    const std::int64_t steps_per_epoch = (batches_per_epoch + flags.accum - 1) / flags.accum;
    const std::int64_t total_samples = train_size * flags.epochs;
    // The training samples the whole job has consumed in the run, at any world size.
    int epoch_now = 0;
    auto samples_done = [&] { return epoch_now * train_size + sampler.state().samples_consumed(); };

    // Resume: model, optimizer, counters, the sampler's position and the random state.
    ddp::Checkpoints checkpoints({.directory = flags.checkpoint_dir, .keep = 2});
    int start_epoch = 0;
    std::int64_t step = 0, batches_done = 0;  // batches_done: of this rank, in the epoch's pass under way
    std::int64_t written_world = world;
    LossSums loss_sums;
    double epoch_seconds_before = 0;  // training time of the epoch under way spent before the last resume
    std::vector<EpochMetrics> history;
    if (!flags.resume && !checkpoints.list().empty()) {
      throw std::invalid_argument("--no-resume, but " + flags.checkpoint_dir +
                                  " holds checkpoints of an earlier run; "
                                  "new ones would mix with them. Choose another --checkpoint-dir, or delete them.");
    }
    if (flags.resume) {
      auto loaded = checkpoints.load_latest([&](torch::serialize::InputArchive& archive) {
        torch::serialize::InputArchive m, o, s;
        archive.read("model", m);
        archive.read("optimizer", o);
        archive.read("sampler", s);
        c10::IValue v;
        archive.read("batch_size", v);
        if (v.toInt() != flags.batch_size) {
          throw std::runtime_error("it was written with --batch-size " + std::to_string(v.toInt()) +
                                   "; resume with the same flags, or start afresh with --no-resume");
        }
        archive.read("accum", v);
        if (v.toInt() != flags.accum) {
          throw std::runtime_error("it was written with --accum " + std::to_string(v.toInt()) +
                                   "; resume with the same flags, or start afresh with --no-resume");
        }
        net->load(m);
        optimizer.load(o);
        torch::serialize::InputArchive scaler_archive;
        c10::IValue scale;
        if (archive.try_read("scaler", scaler_archive) && scaler_archive.try_read("scale", scale)) {
          scaler.load(scaler_archive);  // a float32 or CPU run's checkpoint has no scale: start afresh
        }
        archive.read("epoch", v);
        start_epoch = static_cast<int>(v.toInt());
        archive.read("step", v);
        step = v.toInt();
        archive.read("batches_done", v);
        batches_done = v.toInt();
        at::Tensor sums, rng, past;
        archive.read("loss_sums", sums);
        written_world = archive.try_read("world_size", v) ? v.toInt() : sums.size(0);  // earlier versions: the rows
        if (batches_done > 0) {
          // Mid-epoch: the sampler continues the epoch; at the same world size with exactly the next
          // batch, at another with the rest of the epoch split over the new ranks (a new pass).
          sampler.load(s);
          if (written_world != world) batches_done = 0;
          loss_sums = resumed_loss_sums(sums, written_world, world, rank);
        }
        archive.read("epoch_seconds", v);
        epoch_seconds_before = v.toDouble();
        archive.read("rng", rng);
        at::Generator generator = at::detail::getDefaultCPUGenerator();  // a handle to the default generator
        generator.set_state(rng);
        archive.read("history", past);
        history = unflatten({past.data_ptr<double>(), past.data_ptr<double>() + past.numel()});
      });
      epoch_now = start_epoch;
      set_lr(optimizer, learning_rate(flags, samples_done(), total_samples));
      if (loaded && leader) {
        std::cout << "resumed from " << loaded->path << ": epoch " << start_epoch + 1 << ", step " << step
                  << ", sampler position " << sampler.state().consumed << " of " << sampler.pass_size() << std::endl;
        if (written_world != world) {
          std::cout << "resumed at world size " << world << " (written at " << written_world << "): sample "
                    << with_thousands(sampler.state().samples_consumed()) << " of " << with_thousands(train_size)
                    << " of epoch " << start_epoch + 1 << std::endl;
        }
      }
    }
    // `epoch_seconds`: the training time of the epoch under way so far (0 at an epoch's end).
    auto save_checkpoint = [&](int epoch, double epoch_seconds) {
      const auto all_loss_sums = gather_loss_sums(loss_sums, world);
      checkpoints.save(step, [&](torch::serialize::OutputArchive& archive) {
        torch::serialize::OutputArchive m, o, s, sc;
        net->save(m);
        optimizer.save(o);
        sampler.save(s);
        scaler.save(sc);
        archive.write("model", m);
        archive.write("optimizer", o);
        archive.write("sampler", s);
        archive.write("scaler", sc);
        archive.write("epoch", c10::IValue(static_cast<std::int64_t>(epoch)));
        archive.write("step", c10::IValue(step));
        archive.write("batches_done", c10::IValue(batches_done));
        archive.write("batch_size", c10::IValue(static_cast<std::int64_t>(flags.batch_size)));
        archive.write("world_size", c10::IValue(static_cast<std::int64_t>(world)));
        archive.write("accum", c10::IValue(static_cast<std::int64_t>(flags.accum)));
        archive.write("loss_sums", all_loss_sums);
        archive.write("epoch_seconds", c10::IValue(epoch_seconds));
        archive.write("rng", at::detail::getDefaultCPUGenerator().get_state());
        archive.write("history", torch::tensor(flatten(history), torch::kDouble));
      });
    };

    if (leader) {
      std::cout << "training on " << world << " process" << (world > 1 ? "es" : "") << " (" << ddp::get_backend()
                << ", " << device << "), " << train_size << " training and " << test_size << " test images, "
                << flags.epochs << " epochs of " << steps_per_epoch << " steps, batch " << flags.batch_size
                << " per rank" << (flags.accum > 1 ? " x " + std::to_string(flags.accum) + " micro-batches" : "")
                << (flags.amp ? (device.is_cuda() ? ", float16 autocast with a GradScaler" : ", bfloat16 autocast")
                              : "")
                << (flags.sync_bn ? ", SyncBatchNorm" : "") << std::endl;
    }
    Progress progress(leader, flags.epochs, steps_per_epoch,
                      static_cast<std::int64_t>(flags.batch_size) * world * flags.accum, step);
    std::ofstream sample_log;
    if (!flags.sample_log.empty()) sample_log.open(sample_log_path(flags.sample_log, rank), std::ios::app);
    for (int epoch = start_epoch; epoch < flags.epochs; ++epoch) {
      epoch_now = epoch;
      // 5. A new order every epoch, the same on every rank (a resumed epoch keeps its position).
      if (batches_done == 0) sampler.set_epoch(epoch);
      const std::int64_t batches_in_pass =
          (static_cast<std::int64_t>(sampler.pass_size()) + flags.batch_size - 1) / flags.batch_size;
      std::vector<std::int64_t>
          pass_ids;  // --sample-log: this rank's indices of the pass, as the sampler hands them out
      if (sample_log.is_open()) {
        const auto st = sampler.state();
        pass_ids = ddp::distributed_pass_indices(train_size, world, rank, st.seed, st.epoch, st.start);
      }
      // A resumed epoch's time and images count from the epoch's start, not from the resume.
      const auto epoch_start = std::chrono::steady_clock::now();
      auto epoch_seconds = [&] {
        return epoch_seconds_before +
               std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_start).count();
      };
      for (auto& batch : *loader) {
        const std::int64_t micro = batches_done % flags.accum;
        const bool last_micro = micro == flags.accum - 1 || batches_done + 1 == batches_in_pass;
        const std::int64_t group = std::min<std::int64_t>(flags.accum, batches_in_pass - (batches_done - micro));
        if (sample_log.is_open()) {
          sample_log << epoch << " " << step + 1 << ":";
          const auto first = static_cast<std::size_t>(batches_done * flags.batch_size);
          for (std::size_t i = first; i < first + static_cast<std::size_t>(batch.target.size(0)); ++i) {
            sample_log << " " << pass_ids.at(i);
          }
          sample_log << std::endl;
        }
        auto x = batch.data.to(device), y = batch.target.to(device);
        // 6. backward all-reduces the gradients, except inside no_sync (gradient accumulation).
        auto step_loss = [&] {
          at::Tensor loss;
          {
            ddp::amp::Autocast autocast(
                device.type(), {.dtype = device.is_cuda() ? torch::kHalf : torch::kBFloat16, .enabled = flags.amp});
            loss = torch::cross_entropy_loss(model->forward(x), y);
          }
          scaler.scale(loss / static_cast<double>(group)).backward();
          return loss.item<double>();
        };
        double loss_value;
        if (last_micro) {
          loss_value = step_loss();
        } else {
          auto no_sync = model->no_sync();
          loss_value = step_loss();
        }
        ++batches_done;
        loss_sums.add(loss_value);
        if (!last_micro) continue;
        scaler.step(optimizer);  // skipped when a gradient is inf or NaN (GradScaler on CUDA)
        scaler.update();
        optimizer.zero_grad();
        ++step;
        set_lr(optimizer, learning_rate(flags, samples_done(), total_samples));
        // Steps of the epoch so far at this world size (a resumed epoch's earlier ones may have been others).
        const std::int64_t images_per_step = static_cast<std::int64_t>(flags.batch_size) * flags.accum * world;
        const std::int64_t step_in_epoch = (sampler.state().samples_consumed() + images_per_step - 1) / images_per_step;
        const bool log_now = step % flags.log_every == 0 || batches_done == batches_in_pass;
        if (log_now) {  // every rank at the same steps: these are collectives
          auto sums =
              sum_over_ranks({loss_sums.window_sum, loss_sums.window_count, static_cast<double>(stop_requested)});
          loss_sums.close_window();
          progress.update(epoch + 1, step_in_epoch, step, sums[0] / sums[1]);
          if (sums[2] > 0 && batches_done < batches_in_pass) {
            save_checkpoint(epoch, epoch_seconds());
            progress.finish_line();
            if (leader) std::cout << "stopped by a signal at step " << step << "; run again to resume" << std::endl;
            ddp::destroy_process_group();
            return 0;
          }
        }
        if (step == flags.stop_after && batches_done < batches_in_pass) {
          save_checkpoint(epoch, epoch_seconds());
          progress.finish_line();
          if (leader)
            std::cout << "stopping after step " << step << " (--stop-after); run again to resume" << std::endl;
          ddp::destroy_process_group();
          return 0;
        }
        if (step % flags.checkpoint_every == 0 && batches_done < batches_in_pass)
          save_checkpoint(epoch, epoch_seconds());
      }
      progress.finish_line();
      // Which rank held the others back this epoch, and where its time went (a collective).
      const std::string straggler = model->straggler_report().text;
      auto losses = sum_over_ranks({loss_sums.epoch_sum, loss_sums.epoch_count});  // the last step closed the window
      auto result = evaluate(model, test, test_size, device);
      const double seconds = epoch_seconds();
      const double images = static_cast<double>(train_size);  // the epoch's, at whatever world sizes it ran
      history.push_back({epoch + 1, losses[0] / losses[1], result.loss, result.accuracy,
                         learning_rate(flags, samples_done(), total_samples), seconds, images / seconds});
      batches_done = 0;
      loss_sums = {};
      epoch_seconds_before = 0;
      // 7. Rank 0 saves, then everyone meets at a barrier (inside save).
      save_checkpoint(epoch + 1, 0);
      if (leader) {
        const auto& m = history.back();
        std::printf("epoch %d/%d: train loss %.4f, test loss %.4f, test accuracy %.2f%%, %.1f s\n", m.epoch,
                    flags.epochs, m.train_loss, m.test_loss, 100 * m.test_accuracy, m.seconds);
        std::printf("  %s\n", straggler.c_str());
        std::fflush(stdout);
        write_text(flags.out_dir + "/metrics.csv", to_csv(history));
        write_text(flags.out_dir + "/metrics.svg", render_svg(history));
      }
      if (step == flags.stop_after) break;
    }
    if (leader && start_epoch >= flags.epochs) {
      std::printf(
          "the run in %s has already trained all %d epochs; nothing to do (raise --epochs to train longer, "
          "or choose another --checkpoint-dir for a new run)\n",
          flags.checkpoint_dir.c_str(), flags.epochs);
    }
    if (leader && !history.empty()) {
      double total = 0;
      for (const auto& m : history) total += m.seconds;
      std::printf(
          "done: test accuracy %.2f%% after %d epochs (%.0f s of training); metrics in %s/metrics.csv and "
          "%s/metrics.svg\n",
          100 * history.back().test_accuracy, history.back().epoch, total, flags.out_dir.c_str(),
          flags.out_dir.c_str());
    }
    // 8. The trained weights, for Python's torch.load and for safetensors readers: rank 0 writes,
    //    everyone waits (the lesson's "if rank == 0: torch.save(model.module.state_dict())", barrier).
    const std::string model_pt = flags.out_dir + "/model.pt", model_safetensors = flags.out_dir + "/model.safetensors";
    ddp::save_state_dict(model, model_pt);
    ddp::save_state_dict(model, model_safetensors,
                         {.format = ddp::WeightsFormat::SafeTensors,
                          .metadata = {{"format", "pt"}, {"epochs", std::to_string(flags.epochs)}}});
    if (leader) {
      std::cout << "the model is in " << model_pt << " and " << model_safetensors << "; in Python:\n"
                << "  import sys, torch; sys.path.insert(0, \"examples/fashion_mnist\"); from net import Net\n"
                << "  model = Net(); model.load_state_dict(torch.load(\"" << model_pt << "\", weights_only=True))\n"
                << "  # or, with the safetensors package (pip install safetensors; Debian 12 has no package for it, "
                   "so there in a venv:\n"
                << "  # python3 -m venv --system-site-packages st && st/bin/pip install safetensors, then run this "
                   "with st/bin/python3):\n"
                << "  # from safetensors.torch import load_file; model.load_state_dict(load_file(\""
                << model_safetensors << "\"))" << std::endl;
    }
    ddp::destroy_process_group();
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "train_fashion_mnist: " << e.what() << std::endl;
    return 1;
  }
}
