// The main job's network on Fashion-MNIST through ddp::Accelerator (Hugging Face Accelerate's
// shape): the same program on one CPU process, several, or GPUs; mixed precision and gradient
// accumulation come from the launch. Compare examples/fashion_mnist/main.cpp, which does by hand
// what the Accelerator does here.
//
//   build/examples/train_accelerate --epochs 1
//   ddprun --nproc_per_node=2 --mixed_precision bf16 --gradient_accumulation_steps 2 build/examples/train_accelerate
#include <torch/torch.h>

#include <filesystem>
#include <iostream>
#include <map>

#include "ddp/torch/accelerator.h"
#include "ddp/torch/data/fashion_mnist.h"
#include "fashion_mnist/net.h"

namespace {

// The first `limit` images of a split (all when 0).
struct Images : torch::data::datasets::Dataset<Images> {
  Images(const ddp::data::FashionMNIST& split, std::int64_t limit) {
    const auto n = limit > 0 ? std::min<std::int64_t>(limit, split.images().size(0)) : split.images().size(0);
    images = split.images().narrow(0, 0, n);
    targets = split.targets().narrow(0, 0, n);
  }
  torch::data::Example<> get(std::size_t i) override { return {images[i], targets[i]}; }
  torch::optional<std::size_t> size() const override { return static_cast<std::size_t>(images.size(0)); }
  at::Tensor images, targets;
};

// --name value pairs over defaults; an unknown name or a missing value is an error.
std::map<std::string, std::string> parse(int argc, char** argv) {
  std::map<std::string, std::string> f = {{"epochs", "3"},
                                          {"batch-size", "64"},
                                          {"lr", "0.05"},
                                          {"limit-train", "0"},
                                          {"limit-test", "0"},
                                          {"dropout", "0.25"},
                                          {"sync-bn", "0"},
                                          {"max-grad-norm", "0"},
                                          {"stop-after", "0"},
                                          {"seed", "0"},
                                          {"state-dir", "runs/accelerate/state"},
                                          {"out-dir", "runs/accelerate"},
                                          {"data-dir", ddp::data::FashionMNIST::kDefaultRoot}};
  for (int i = 1; i < argc; i += 2) {
    const std::string name = std::string(argv[i]).substr(2);
    if (std::string(argv[i]).rfind("--", 0) != 0 || !f.count(name) || i + 1 >= argc) {
      throw std::invalid_argument(std::string("bad flag ") + argv[i] +
                                  "; flags: --name value, names: epochs, "
                                  "batch-size, lr, limit-train, limit-test, dropout, sync-bn, max-grad-norm, "
                                  "stop-after, seed, state-dir, out-dir, data-dir");
    }
    f[name] = argv[i + 1];
  }
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    auto f = parse(argc, argv);
    ddp::Accelerator acc;  // the group, the device, mixed precision and accumulation from the launch
    torch::manual_seed(std::stoll(f["seed"]));
    auto model = acc.prepare(Net(f["sync-bn"] == "1", std::stod(f["dropout"])));
    auto optimizer =
        acc.prepare(torch::optim::SGD(model->parameters(), torch::optim::SGDOptions(std::stod(f["lr"])).momentum(0.9)));
    const std::int64_t batch = std::stoll(f["batch-size"]);
    auto train = acc.prepare(Images(ddp::data::FashionMNIST(f["data-dir"], ddp::data::FashionMNIST::Mode::kTrain),
                                    std::stoll(f["limit-train"])),
                             {.batch_size = batch, .seed = std::stoull(f["seed"])});
    auto test = acc.prepare(Images(ddp::data::FashionMNIST(f["data-dir"], ddp::data::FashionMNIST::Mode::kTest),
                                   std::stoll(f["limit-test"])),
                            {.batch_size = 500, .shuffle = false});
    if (std::filesystem::exists(f["state-dir"]) && !std::filesystem::is_empty(f["state-dir"])) {
      acc.load_state(f["state-dir"]);
      acc.print("resumed from ", f["state-dir"], " at step ", acc.step(), ", epoch ", train.epoch() + 1);
    }
    acc.print("training on ", acc.num_processes(), " process(es), ", acc.device(), ", mixed precision ",
              ddp::to_string(acc.mixed_precision()), ", ", acc.gradient_accumulation_steps(),
              " micro-step(s) per step");
    const int epochs = std::stoi(f["epochs"]);
    const std::int64_t stop_after = std::stoll(f["stop-after"]);
    while (train.epoch() < epochs) {
      model->train();
      double loss_sum = 0, batches = 0;
      for (auto& b : train) {
        auto scope = acc.accumulate(model);
        auto loss = torch::cross_entropy_loss(model(b.data), b.target);
        acc.backward(loss);
        if (acc.sync_gradients() && std::stod(f["max-grad-norm"]) > 0)
          acc.clip_grad_norm_(model->parameters(), std::stod(f["max-grad-norm"]));
        optimizer.step();
        optimizer.zero_grad();
        loss_sum += loss.item<double>(), ++batches;
        if (stop_after > 0 && acc.sync_gradients() && acc.step() == stop_after) {
          acc.save_state(f["state-dir"]);
          acc.print("stopped after step ", acc.step(), "; run again to resume");
          return 0;
        }
      }
      torch::NoGradGuard no_grad;
      model->eval();
      std::int64_t correct = 0, seen = 0;
      for (auto& b : test) {
        auto right = acc.gather_for_metrics(model(b.data).argmax(1).eq(b.target));
        correct += right.sum().item<std::int64_t>(), seen += right.size(0);
      }
      auto mean_loss = acc.gather_for_metrics(torch::tensor(loss_sum / std::max(batches, 1.0))).mean().item<double>();
      acc.print("epoch ", train.epoch(), ": train loss ", mean_loss, ", test accuracy ", 100.0 * correct / seen,
                "% of ", seen, " images, step ", acc.step());
      acc.save_state(f["state-dir"]);
    }
    acc.save_model(model, f["out-dir"]);
    acc.print("done: the weights are in ", f["out-dir"], "/model.safetensors");
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "train_accelerate: " << e.what() << std::endl;
    return 1;
  }
}
