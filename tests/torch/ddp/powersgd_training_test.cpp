// PowerSGD inside DistributedDataParallel at 2 ranks: training the MLP with it reaches plain
// all-reduce's accuracy, and its state saved with a checkpoint resumes the run to the bit.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "ddp/ddp.h"
#include "ddp/torch/powersgd.h"
#include "models.h"
#include "reopened_archive.h"
#include "support/expect_error.h"
#include "support/multiprocess.h"

namespace ddp::test {
namespace {

using namespace std::chrono_literals;
using comm_hooks::PowerSGDOptions;
using comm_hooks::PowerSGDState;

// A learnable problem for the MLP (20 features, 4 classes, a linear teacher): 1536 training
// samples, 512 held out.
struct Problem {
  at::Tensor x, y;
  Problem() {
    data::SyntheticClassification data({.size = 2048, .shape = {20}, .num_classes = 4, .seed = 3});
    std::vector<at::Tensor> xs, ys;
    for (std::size_t i = 0; i < 2048; ++i) {
      auto example = data.get(i);
      xs.push_back(example.data);
      ys.push_back(example.target);
    }
    x = torch::stack(xs);
    y = torch::stack(ys);
  }
};

constexpr int kBatch = 32;  // per rank
constexpr int kTrain = 1536;
constexpr int kEpochs = 10;  // 24 steps each

struct Outcome {
  double accuracy, loss;
};

// Trains a fresh MLP (the same initial weights every time) with `hook` (none: plain DDP) and
// returns its held-out accuracy and loss.
Outcome train(const Problem& problem, int rank, CommHook hook) {
  torch::manual_seed(0);
  auto net = std::make_shared<Mlp>();
  DistributedDataParallel model(net);
  if (hook) model->register_comm_hook(std::move(hook));
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  for (int epoch = 0; epoch < kEpochs; ++epoch) {
    for (int at = 0; at + 2 * kBatch <= kTrain; at += 2 * kBatch) {
      auto rows = torch::arange(at + rank * kBatch, at + (rank + 1) * kBatch);
      optimizer.zero_grad();
      torch::nn::functional::cross_entropy(model->forward(problem.x.index({rows})), problem.y.index({rows})).backward();
      optimizer.step();
    }
  }
  torch::NoGradGuard no_grad;
  auto held_x = problem.x.narrow(0, kTrain, 2048 - kTrain), held_y = problem.y.narrow(0, kTrain, 2048 - kTrain);
  auto out = net->forward(held_x);
  return {out.argmax(1).eq(held_y).to(torch::kFloat64).mean().item<double>(),
          torch::nn::functional::cross_entropy(out, held_y).item<double>()};
}

TEST(PowerSgdTraining, WithErrorFeedbackReachesPlainAllReducesAccuracy) {
  run_ranks(
      2,
      [](int rank, int) {
    torch::set_num_threads(1);
    init_process_group("gloo", {.timeout = 60s});
    Problem problem;
    const Outcome plain = train(problem, rank, nullptr);
    auto state =
        std::make_shared<PowerSGDState>(PowerSGDOptions{.matrix_approximation_rank = 1, .start_powerSGD_iter = 10});
    const Outcome compressed = train(problem, rank, comm_hooks::powersgd(state));
    std::cout << "rank " << rank << ": plain all-reduce accuracy " << plain.accuracy << " loss " << plain.loss
              << "; PowerSGD rank 1 accuracy " << compressed.accuracy << " loss " << compressed.loss << " (compression "
              << state->compression_rate() << "x)\n";
    EXPECT_EQ(state->iter(), kEpochs * kTrain / (2 * kBatch));
    EXPECT_GT(state->compression_rate(), 5.0);  // it did compress: (20+32, 32+16, 16+4) x 1 of 1088 values
    EXPECT_GT(plain.accuracy, 0.85);            // the problem is learned at all
    // The tolerance: PowerSGD at rank 1 with error feedback within 3 points of plain all-reduce.
    EXPECT_GE(compressed.accuracy, plain.accuracy - 0.03);
    EXPECT_LE(compressed.loss, plain.loss * 2 + 0.02);  // and its held-out loss within 2x
      },
      {.deadline = 120s});
}

// Steps [from, to) of the MLP's training on random data (each step's batch from its own seed).
void steps(DistributedDataParallel<Mlp>& model, torch::optim::Optimizer& optimizer, int rank, int from, int to) {
  for (int step = from; step < to; ++step) {
    auto [x, y] = batch(step * 2 + rank, 16);
    optimizer.zero_grad();
    torch::nn::functional::cross_entropy(model->forward(x), y).backward();
    optimizer.step();
  }
}

std::vector<at::Tensor> weights(Mlp& net) {
  std::vector<at::Tensor> out;
  for (auto& p : net.parameters()) out.push_back(p.detach().clone());
  return out;
}

bool same_bits(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!torch::equal(a[i], b[i])) return false;
  }
  return true;
}

TEST(PowerSgdTraining, StateSavedWithTheCheckpointResumesIdentically) {
  run_ranks(2, [](int rank, int) {
    torch::set_num_threads(1);
    init_process_group("gloo", {.timeout = 60s});
    const PowerSGDOptions options{.matrix_approximation_rank = 2, .start_powerSGD_iter = 3, .random_seed = 5};
    // The run through: 6 steps, a checkpoint (model, optimizer, PowerSGD state), 6 more.
    torch::manual_seed(0);
    auto net = std::make_shared<Mlp>();
    DistributedDataParallel model(net);
    auto state = std::make_shared<PowerSGDState>(options);
    model->register_comm_hook(comm_hooks::powersgd(state));
    torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
    steps(model, optimizer, rank, 0, 6);
    torch::serialize::OutputArchive checkpoint, net_part, optimizer_part, state_part;
    net->save(net_part);
    optimizer.save(optimizer_part);
    state->save(state_part);
    checkpoint.write("model", net_part);
    checkpoint.write("optimizer", optimizer_part);
    checkpoint.write("powersgd", state_part);
    std::ostringstream bytes;  // now: an archive holds the tensors themselves, which training changes
    checkpoint.save_to(bytes);
    const std::string saved = bytes.str();
    steps(model, optimizer, rank, 6, 12);
    const auto through = weights(*net);

    // A new model, optimizer and DDP resumed from the checkpoint; `fresh_state`: a new PowerSGD
    // state instead of the saved one (the control: resuming without it differs).
    auto resume = [&](bool fresh_state) {
      torch::serialize::InputArchive in;
      in.load_from(saved.data(), saved.size());
      auto again = std::make_shared<Mlp>();
      torch::serialize::InputArchive part;
      in.read("model", part);
      again->load(part);
      DistributedDataParallel resumed(again);
      auto restored = std::make_shared<PowerSGDState>(PowerSGDOptions{.start_powerSGD_iter = 50});
      in.read("powersgd", part);
      if (fresh_state) {
        restored = std::make_shared<PowerSGDState>(options);
      } else {
        restored->load(part);
      }
      resumed->register_comm_hook(comm_hooks::powersgd(restored));
      torch::optim::SGD resumed_optimizer(resumed->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
      in.read("optimizer", part);
      resumed_optimizer.load(part);
      EXPECT_EQ(restored->iter(), fresh_state ? 0 : 6);
      steps(resumed, resumed_optimizer, rank, 6, 12);
      EXPECT_EQ(restored->options().start_powerSGD_iter, 3);  // the saved options replaced the 50
      return weights(*again);
    };
    EXPECT_TRUE(same_bits(resume(false), through)) << "resumed from the checkpoint, the weights differ";
    EXPECT_FALSE(same_bits(resume(true), through)) << "the control (no saved PowerSGD state) should differ";
  });
}

TEST(PowerSgdTraining, StateOfOtherBucketsIsAClearError) {
  run_ranks(1, [](int, int) {
    init_process_group("gloo", {.timeout = 30s});
    auto state = std::make_shared<PowerSGDState>(PowerSGDOptions{.start_powerSGD_iter = 2});
    auto hook = comm_hooks::powersgd(state);
    auto run = [&](std::int64_t rows) {
      GradBucket bucket(0, true, torch::randn({rows * 8}), {torch::empty({rows, 8})}, get_default_group());
      return hook(bucket)->wait();
    };
    for (int i = 0; i < 3; ++i) run(8);  // two plain steps, one compressed: error, P and Q memorized
    torch::serialize::OutputArchive out;
    state->save(out);
    auto in = reopened(out);
    state->load(in);
    EXPECT_EQ(state->iter(), 3);
    expect_error<Error>([&] { run(6); }, {"powersgd: bucket 0 holds parameters of shapes [6, 8]",
                                          "memorized error and Q are for [8, 8]", "buckets changed"});
  });
}

// A resumed DDP's first buckets may hold the parameters in another order than the rebuilt buckets
// the state was memorized with: the hook carries each parameter's error and Q over to the new
// order, so the result is the one the old order would have given, rearranged. (Without that, the
// flat error and Q, of the same sizes, would be added to the wrong parameters.)
TEST(PowerSgdTraining, ParametersInAnotherOrderKeepTheirErrorAndQ) {
  run_ranks(1, [](int, int) {
    init_process_group("gloo", {.timeout = 30s});
    // {4, 6} and {4, 2, 3} are both 4 x 6 matrices: their Qs lie side by side (grouped by shape).
    const std::vector<std::vector<std::int64_t>> shapes = {{8, 8}, {8}, {4, 6}, {4, 2, 3}};
    const std::vector<std::size_t> order = {3, 1, 0, 2};  // the new order
    auto gradient = [](int step, std::size_t k) {
      return torch::sin(torch::arange(1, 65, torch::kFloat32) * (0.3 + 0.1 * step + 0.7 * k));
    };
    auto run = [&](PowerSGDState& state, int step, bool reordered) {
      std::vector<at::Tensor> params, parts;
      for (std::size_t i = 0; i < shapes.size(); ++i) {
        const std::size_t k = reordered ? order[i] : i;
        params.push_back(torch::empty(shapes[k]));
        parts.push_back(gradient(step, k).narrow(0, 0, params.back().numel()));
      }
      GradBucket bucket(0, true, torch::cat(parts), params, get_default_group());
      at::Tensor out = comm_hooks::powersgd(std::shared_ptr<PowerSGDState>(&state, [](auto*) {}))(bucket)->wait();
      if (!reordered) return out;
      std::vector<at::Tensor> back(shapes.size());  // back to the old order
      std::int64_t at = 0;
      for (std::size_t i = 0; i < shapes.size(); ++i) {
        back[order[i]] = out.narrow(0, at, params[i].numel());
        at += params[i].numel();
      }
      return torch::cat(back);
    };
    const PowerSGDOptions options{.start_powerSGD_iter = 2, .random_seed = 3};
    PowerSGDState kept(options), moved(options);
    for (int step = 0; step < 4; ++step) {
      run(kept, step, false);
      run(moved, step, false);
    }
    for (int step = 4; step < 6; ++step) {
      at::Tensor expected = run(kept, step, false);
      EXPECT_TRUE(torch::equal(run(moved, step, true), expected)) << "step " << step;
    }
  });
}

}  // namespace
}  // namespace ddp::test
