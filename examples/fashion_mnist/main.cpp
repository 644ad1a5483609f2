// Distributed training on Fashion-MNIST, step by step as PyTorch's DDP lesson teaches it:
// join the process group, pin the device from LOCAL_RANK, wrap the model in
// DistributedDataParallel, shard the data with DistributedSampler (set_epoch every epoch), let
// backward all-reduce the gradients, save checkpoints on rank 0 and meet at a barrier.
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
// the step, so resuming needs no scheduler state.
double learning_rate(const Flags& f, std::int64_t step, std::int64_t total_steps) {
  const double progress = std::min(1.0, static_cast<double>(step) / static_cast<double>(std::max<std::int64_t>(total_steps, 1)));
  return f.lr * (0.05 + 0.95 * 0.5 * (1 + std::cos(M_PI * progress)));
}

void set_lr(torch::optim::SGD& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) static_cast<torch::optim::SGDOptions&>(group.options()).lr(lr);
}

// Sums over every rank: what is printed is about the whole job, not one shard.
std::vector<double> sum_over_ranks(std::vector<double> values) {
  auto t = torch::tensor(values, torch::kDouble);
  ddp::all_reduce(t);
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

// Every rank's loss sums, in rank order ([world, 4]): a checkpoint keeps them all, since each
// rank's share of a mean is its own. Collective.
at::Tensor gather_loss_sums(const LossSums& mine, int world) {
  auto all = torch::empty({world * 4}, torch::kDouble);
  ddp::all_gather_into_tensor(all, torch::tensor(mine.values(), torch::kDouble));
  return all.view({world, 4});
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
    ddp::init_process_group(flags.backend, {.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(flags.timeout * 1000))});
    const int rank = ddp::get_rank(), world = ddp::get_world_size();
    // 2. One device per process, chosen by LOCAL_RANK.
    const int local_rank = ddp::get_local_rank();
    torch::Device device = torch::cuda::is_available() && ddp::get_backend() == "nccl"
                               ? torch::Device(torch::kCUDA, local_rank)
                               : torch::Device(torch::kCPU);
    const bool leader = rank == 0;

    ddp::data::FashionMNIST train(flags.data_dir, ddp::data::FashionMNIST::Mode::kTrain);
    ddp::data::FashionMNIST test(flags.data_dir, ddp::data::FashionMNIST::Mode::kTest);
    const auto train_size = flags.limit_train ? std::min<std::int64_t>(flags.limit_train, *train.size()) : *train.size();
    const auto test_size = flags.limit_test ? std::min<std::int64_t>(flags.limit_test, *test.size()) : *test.size();

    // 3. The model on its device, wrapped in DistributedDataParallel (it starts from rank 0's weights).
    //    With --sync-bn its batch norm layers are SyncBatchNorm (PyTorch's convert_sync_batchnorm).
    torch::manual_seed(flags.seed);
    Net net(flags.sync_bn);
    net->to(device);
    ddp::DDPOptions ddp_options;
    if (device.is_cuda()) ddp_options.device_ids = {local_rank};
    ddp::DistributedDataParallel model(net, ddp_options);
    torch::optim::SGD optimizer(model->parameters(),
                                torch::optim::SGDOptions(flags.lr).momentum(0.9).weight_decay(5e-4));

    // 4. Each rank reads its own shard; together they cover the training set once per epoch.
    ddp::DistributedSampler sampler(static_cast<std::size_t>(train_size), {.seed = flags.seed});
    auto loader = torch::data::make_data_loader(train.map(torch::data::transforms::Stack<>()), sampler,
                                                torch::data::DataLoaderOptions(flags.batch_size));
    const std::int64_t batches_per_epoch = (static_cast<std::int64_t>(sampler.size()) + flags.batch_size - 1) / flags.batch_size;
    const std::int64_t steps_per_epoch = (batches_per_epoch + flags.accum - 1) / flags.accum;
    const std::int64_t total_steps = steps_per_epoch * flags.epochs;

    // Resume: model, optimizer, counters, the sampler's position and the random state.
    ddp::Checkpoints checkpoints({.directory = flags.checkpoint_dir, .keep = 2});
    int start_epoch = 0;
    std::int64_t step = 0, batches_done = 0;
    LossSums loss_sums;
    double epoch_seconds_before = 0;  // training time of the epoch under way spent before the last resume
    std::vector<EpochMetrics> history;
    if (!flags.resume && !checkpoints.list().empty()) {
      throw std::invalid_argument("--no-resume, but " + flags.checkpoint_dir + " holds checkpoints of an earlier run; "
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
        archive.read("epoch", v);
        start_epoch = static_cast<int>(v.toInt());
        archive.read("step", v);
        step = v.toInt();
        archive.read("batches_done", v);
        batches_done = v.toInt();
        if (batches_done > 0) sampler.load(s);  // mid-epoch: continue with exactly the next batch
        at::Tensor sums, rng, past;
        archive.read("loss_sums", sums);
        if (batches_done > 0) {  // mid-epoch: this rank's own sums (the sampler has checked the world size)
          if (sums.dim() != 2 || sums.size(0) != world || sums.size(1) != 4) {
            throw std::runtime_error("its loss sums are not those of " + std::to_string(world) +
                                     " ranks; resume with as many ranks, or start afresh with --no-resume");
          }
          auto row = sums[rank].contiguous();
          loss_sums = LossSums::from_values({row.data_ptr<double>(), row.data_ptr<double>() + 4});
        }
        archive.read("epoch_seconds", v);
        epoch_seconds_before = v.toDouble();
        archive.read("rng", rng);
        at::Generator generator = at::detail::getDefaultCPUGenerator();  // a handle to the default generator
        generator.set_state(rng);
        archive.read("history", past);
        history = unflatten({past.data_ptr<double>(), past.data_ptr<double>() + past.numel()});
      });
      set_lr(optimizer, learning_rate(flags, step, total_steps));
      if (loaded && leader) {
        std::cout << "resumed from " << loaded->path << ": epoch " << start_epoch + 1 << ", step " << step
                  << ", sampler position " << sampler.state().consumed << " of " << sampler.size() << std::endl;
      }
    }
    // `epoch_seconds`: the training time of the epoch under way so far (0 at an epoch's end).
    auto save_checkpoint = [&](int epoch, double epoch_seconds) {
      const auto all_loss_sums = gather_loss_sums(loss_sums, world);
      checkpoints.save(step, [&](torch::serialize::OutputArchive& archive) {
        torch::serialize::OutputArchive m, o, s;
        net->save(m);
        optimizer.save(o);
        sampler.save(s);
        archive.write("model", m);
        archive.write("optimizer", o);
        archive.write("sampler", s);
        archive.write("epoch", c10::IValue(static_cast<std::int64_t>(epoch)));
        archive.write("step", c10::IValue(step));
        archive.write("batches_done", c10::IValue(batches_done));
        archive.write("batch_size", c10::IValue(static_cast<std::int64_t>(flags.batch_size)));
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
                << (flags.sync_bn ? ", SyncBatchNorm" : "") << std::endl;
    }
    Progress progress(leader, flags.epochs, steps_per_epoch,
                      static_cast<std::int64_t>(flags.batch_size) * world * flags.accum, step);
    for (int epoch = start_epoch; epoch < flags.epochs; ++epoch) {
      // 5. A new order every epoch, the same on every rank (a resumed epoch keeps its position).
      if (batches_done == 0) sampler.set_epoch(epoch);
      // A resumed epoch's time and images count from the epoch's start, not from the resume.
      const auto epoch_start = std::chrono::steady_clock::now();
      auto epoch_seconds = [&] {
        return epoch_seconds_before + std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_start).count();
      };
      const std::int64_t first_step_of_epoch = static_cast<std::int64_t>(epoch) * steps_per_epoch;
      for (auto& batch : *loader) {
        const std::int64_t micro = batches_done % flags.accum;
        const bool last_micro = micro == flags.accum - 1 || batches_done + 1 == batches_per_epoch;
        const std::int64_t group = std::min<std::int64_t>(flags.accum, batches_per_epoch - (batches_done - micro));
        auto x = batch.data.to(device), y = batch.target.to(device);
        // 6. backward all-reduces the gradients, except inside no_sync (gradient accumulation).
        auto step_loss = [&] {
          auto loss = torch::cross_entropy_loss(model->forward(x), y);
          (loss / static_cast<double>(group)).backward();
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
        optimizer.step();
        optimizer.zero_grad();
        ++step;
        set_lr(optimizer, learning_rate(flags, step, total_steps));
        const std::int64_t step_in_epoch = (batches_done + flags.accum - 1) / flags.accum;
        const bool log_now = step % flags.log_every == 0 || batches_done == batches_per_epoch;
        if (log_now) {  // every rank at the same steps: these are collectives
          auto sums = sum_over_ranks({loss_sums.window_sum, loss_sums.window_count, static_cast<double>(stop_requested)});
          loss_sums.close_window();
          progress.update(epoch + 1, step_in_epoch, step, sums[0] / sums[1]);
          if (sums[2] > 0 && batches_done < batches_per_epoch) {
            save_checkpoint(epoch, epoch_seconds());
            progress.finish_line();
            if (leader) std::cout << "stopped by a signal at step " << step << "; run again to resume" << std::endl;
            ddp::destroy_process_group();
            return 0;
          }
        }
        if (step == flags.stop_after && batches_done < batches_per_epoch) {
          save_checkpoint(epoch, epoch_seconds());
          progress.finish_line();
          if (leader) std::cout << "stopping after step " << step << " (--stop-after); run again to resume" << std::endl;
          ddp::destroy_process_group();
          return 0;
        }
        if (step % flags.checkpoint_every == 0 && batches_done < batches_per_epoch) save_checkpoint(epoch, epoch_seconds());
      }
      progress.finish_line();
      auto losses = sum_over_ranks({loss_sums.epoch_sum, loss_sums.epoch_count});  // the last step closed the window
      auto result = evaluate(model, test, test_size, device);
      const double seconds = epoch_seconds();
      const double images = static_cast<double>((step - first_step_of_epoch) * flags.batch_size * flags.accum * world);
      history.push_back({epoch + 1, losses[0] / losses[1], result.loss, result.accuracy,
                         learning_rate(flags, step, total_steps), seconds, images / seconds});
      batches_done = 0;
      loss_sums = {};
      epoch_seconds_before = 0;
      // 7. Rank 0 saves, then everyone meets at a barrier (inside save).
      save_checkpoint(epoch + 1, 0);
      if (leader) {
        const auto& m = history.back();
        std::printf("epoch %d/%d: train loss %.4f, test loss %.4f, test accuracy %.2f%%, %.1f s\n", m.epoch,
                    flags.epochs, m.train_loss, m.test_loss, 100 * m.test_accuracy, m.seconds);
        std::fflush(stdout);
        write_text(flags.out_dir + "/metrics.csv", to_csv(history));
        write_text(flags.out_dir + "/metrics.svg", render_svg(history));
      }
      if (step == flags.stop_after) break;
    }
    if (leader && start_epoch >= flags.epochs) {
      std::printf("the run in %s has already trained all %d epochs; nothing to do (raise --epochs to train longer, "
                  "or choose another --checkpoint-dir for a new run)\n", flags.checkpoint_dir.c_str(), flags.epochs);
    }
    if (leader && !history.empty()) {
      double total = 0;
      for (const auto& m : history) total += m.seconds;
      std::printf("done: test accuracy %.2f%% after %d epochs (%.0f s of training); metrics in %s/metrics.csv and "
                  "%s/metrics.svg\n",
                  100 * history.back().test_accuracy, history.back().epoch, total, flags.out_dir.c_str(),
                  flags.out_dir.c_str());
    }
    ddp::destroy_process_group();
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "train_fashion_mnist: " << e.what() << std::endl;
    return 1;
  }
}
