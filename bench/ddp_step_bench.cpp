// One DDP training step (forward, backward with the gradient all-reduce, SGD step), timed on one
// rank of a ddp job; run_ddp_step.py runs it beside PyTorch's DDP (torch_ddp_step.py), and
// scripts/gpu_check.sh runs it on a GPU.
//   ddp_step_bench --model mlp|cnn|fashion|resnet50 [--no-ddp] [--steps N] [--batch B]
//                  [--device cpu|cuda] [--backend gloo|nccl] [--comm-hook allreduce|powersgd:R] [--sync-bn]
//                  [--bucket-view] [--lockstep] [--trace PATH]
// Prints "<median step ms>" on rank 0. On the CPU (the default) each rank uses one intra-op
// thread and gloo; with --device cuda each rank uses the GPU its LOCAL_RANK names, nccl by default,
// and every step ends with a device synchronization. --comm-hook allreduce registers the default
// all-reduce hook explicitly, so that a group of one still fills and averages its buckets (DDP's
// own work without communication; without a hook a group of one skips it); powersgd:R registers
// PowerSGD at rank R (error feedback, warm start, compressing from the second step, so that the
// timed steps are all compressed). `fashion` is the
// training example's network (examples/fashion_mnist/net.h), with --sync-bn its SyncBatchNorm
// variant; run_sync_bn_step.py compares the two. --bucket-view sets gradient_as_bucket_view (the
// gradients live in the buckets: no copy in, none out). --no-ddp at a world size above 1 is the
// limit run_ddp_step.py sets beside DDP: every rank trains at once, with only the per-step barrier.
// --lockstep times that barrier too (the step ends when every rank has finished it): the limit for
// any synchronous data parallelism, whose all-reduce waits for the slowest rank's backward.
// --trace PATH (LibTorch 2.x) runs one more step under LibTorch's profiler (Kineto: the ops on
// the CPU and, on a GPU, every kernel and copy on the stream it ran on) and writes it to PATH as
// a Chrome trace (chrome://tracing, ui.perfetto.dev); "{rank}" in PATH becomes the rank.
#include <torch/torch.h>
#include <torch/version.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <set>
#include <string>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/autograd/profiler_kineto.h>
#define DDP_BENCH_TRACE 1
#endif

#include "ddp/ddp.h"
#include "fashion_mnist/net.h"

namespace {

struct Mlp : torch::nn::Module {  // 784-1024-1024-10: 1.86M parameters
  Mlp() {
    fc1 = register_module("fc1", torch::nn::Linear(784, 1024));
    fc2 = register_module("fc2", torch::nn::Linear(1024, 1024));
    fc3 = register_module("fc3", torch::nn::Linear(1024, 10));
  }
  at::Tensor forward(const at::Tensor& x) { return fc3(torch::relu(fc2(torch::relu(fc1(x.flatten(1)))))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
};

struct Cnn : torch::nn::Module {  // PyTorch's MNIST example network: 1.2M parameters
  Cnn() {
    conv1 = register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 32, 3)));
    conv2 = register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 3)));
    fc1 = register_module("fc1", torch::nn::Linear(9216, 128));
    fc2 = register_module("fc2", torch::nn::Linear(128, 10));
  }
  at::Tensor forward(const at::Tensor& x) {
    auto h = torch::max_pool2d(torch::relu(conv2(torch::relu(conv1(x)))), 2);
    return fc2(torch::relu(fc1(h.flatten(1))));
  }
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

// ResNet-50 (torchvision's layout: bottleneck blocks 3-4-6-3, 25.6M parameters), on 224x224 images.
torch::nn::Conv2d conv(int in, int out, int kernel, int stride = 1) {
  return torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, kernel).stride(stride).padding(kernel / 2).bias(false));
}

struct Bottleneck : torch::nn::Module {
  Bottleneck(int in, int width, int stride) {
    const int out = width * 4;
    c1 = register_module("conv1", conv(in, width, 1));
    b1 = register_module("bn1", torch::nn::BatchNorm2d(width));
    c2 = register_module("conv2", conv(width, width, 3, stride));
    b2 = register_module("bn2", torch::nn::BatchNorm2d(width));
    c3 = register_module("conv3", conv(width, out, 1));
    b3 = register_module("bn3", torch::nn::BatchNorm2d(out));
    if (stride != 1 || in != out) {
      down =
          register_module("downsample", torch::nn::Sequential(conv(in, out, 1, stride), torch::nn::BatchNorm2d(out)));
    }
  }
  at::Tensor forward(const at::Tensor& x) {
    auto h = torch::relu(b1(c1(x)));
    h = torch::relu(b2(c2(h)));
    h = b3(c3(h));
    return torch::relu(h + (down ? down->forward(x) : x));
  }
  torch::nn::Conv2d c1{nullptr}, c2{nullptr}, c3{nullptr};
  torch::nn::BatchNorm2d b1{nullptr}, b2{nullptr}, b3{nullptr};
  torch::nn::Sequential down{nullptr};
};

struct ResNet50 : torch::nn::Module {
  ResNet50() {
    stem = register_module("conv1", conv(3, 64, 7, 2));
    bn = register_module("bn1", torch::nn::BatchNorm2d(64));
    int in = 64;
    const int blocks[] = {3, 4, 6, 3};
    for (int stage = 0; stage < 4; ++stage) {
      torch::nn::Sequential layer;
      const int width = 64 << stage;
      for (int b = 0; b < blocks[stage]; ++b) {
        layer->push_back(std::make_shared<Bottleneck>(in, width, b == 0 && stage > 0 ? 2 : 1));
        in = width * 4;
      }
      layers.push_back(register_module("layer" + std::to_string(stage + 1), layer));
    }
    fc = register_module("fc", torch::nn::Linear(2048, 1000));
  }
  at::Tensor forward(const at::Tensor& x) {
    auto h = torch::max_pool2d(torch::relu(bn(stem(x))), 3, 2, 1);
    for (auto& layer : layers) h = layer->forward(h);
    return fc(torch::adaptive_avg_pool2d(h, {1, 1}).flatten(1));
  }
  torch::nn::Conv2d stem{nullptr};
  torch::nn::BatchNorm2d bn{nullptr};
  std::vector<torch::nn::Sequential> layers;
  torch::nn::Linear fc{nullptr};
};

struct Config {
  bool use_ddp = true;
  bool hook = false;
  int powersgd_rank = 0;  // > 0: the PowerSGD hook at this rank
  bool bucket_view = false;
  bool sync_bn = false;
  bool lockstep = false;  // the barrier inside the timed step
  int steps = 30;
  int batch = 64;
  torch::Device device = torch::kCPU;
  std::string trace;  // a Chrome trace of one more step is written here; "" none
};

// Runs `step` once under LibTorch's profiler and writes its trace to `path`.
template <typename Step>
void trace_step(Step step, const Config& c, const std::string& path) {
#ifdef DDP_BENCH_TRACE
  namespace prof = torch::autograd::profiler;
  using torch::profiler::impl::ActivityType;
  const torch::profiler::impl::ProfilerConfig config(torch::profiler::impl::ProfilerState::KINETO);
  std::set<ActivityType> activities{ActivityType::CPU};
  if (c.device.is_cuda()) activities.insert(ActivityType::CUDA);
  prof::prepareProfiler(config, activities);
  prof::enableProfiler(config, activities);
  step();
  prof::disableProfiler()->save(path);
#else
  (void)step, (void)c, (void)path;  // main() refuses --trace before this
#endif
}

template <typename Forward>
double median_step_ms(Forward forward, torch::optim::Optimizer& optimizer, const Config& c, at::Tensor x, int classes) {
  auto y = torch::randint(0, classes, {c.batch}).to(c.device);
  x = x.to(c.device);
  auto step = [&] {
    optimizer.zero_grad();
    torch::cross_entropy_loss(forward(x), y).backward();
    optimizer.step();
    if (c.device.is_cuda()) torch::cuda::synchronize(c.device.index());
  };
  std::vector<double> times;
  for (int i = 0; i < c.steps + 5; ++i) {
    ddp::barrier();
    if (c.device.is_cuda()) torch::cuda::synchronize(c.device.index());
    auto start = std::chrono::steady_clock::now();
    step();
    if (c.lockstep) ddp::barrier();
    std::chrono::duration<double, std::milli> elapsed = std::chrono::steady_clock::now() - start;
    if (i >= 5) times.push_back(elapsed.count());
  }
  if (!c.trace.empty()) {
    ddp::barrier();
    std::string path = c.trace;
    if (const auto at = path.find("{rank}"); at != std::string::npos)
      path.replace(at, 6, std::to_string(ddp::get_rank()));
    trace_step(step, c, path);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

template <typename M>
std::shared_ptr<M> make(const Config& c) {
  if constexpr (std::is_same_v<M, NetImpl>) {
    return std::make_shared<M>(c.sync_bn);
  } else {
    return std::make_shared<M>();
  }
}

template <typename M>
double run(const Config& c, at::Tensor x, int classes) {
  auto model = make<M>(c);
  model->to(c.device);
  if (!c.use_ddp) {
    torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
    return median_step_ms([&](const at::Tensor& in) { return model->forward(in); }, optimizer, c, x, classes);
  }
  ddp::DDPOptions options;
  if (c.device.is_cuda()) options.device_ids = {c.device.index()};
  options.gradient_as_bucket_view = c.bucket_view;
  ddp::DistributedDataParallel ddp_model(model, options);
  if (c.hook) ddp_model->register_comm_hook(ddp::comm_hooks::allreduce());
  if (c.powersgd_rank > 0) {
    auto state = std::make_shared<ddp::comm_hooks::PowerSGDState>(
        ddp::comm_hooks::PowerSGDOptions{.matrix_approximation_rank = c.powersgd_rank, .start_powerSGD_iter = 2});
    ddp_model->register_comm_hook(ddp::comm_hooks::powersgd(state));
  }
  torch::optim::SGD optimizer(ddp_model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  return median_step_ms([&](const at::Tensor& in) { return ddp_model->forward(in); }, optimizer, c, x, classes);
}

}  // namespace

int main(int argc, char** argv) {
  std::string model = "mlp", device = "cpu", backend;
  Config c;
  bool batch_given = false;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (flag == "--model" && i + 1 < argc) model = argv[++i];
    else if (flag == "--no-ddp") c.use_ddp = false;
    else if (flag == "--steps" && i + 1 < argc) c.steps = std::stoi(argv[++i]);
    else if (flag == "--batch" && i + 1 < argc) c.batch = std::stoi(argv[++i]), batch_given = true;
    else if (flag == "--device" && i + 1 < argc) device = argv[++i];
    else if (flag == "--backend" && i + 1 < argc) backend = argv[++i];
    else if (flag == "--comm-hook" && i + 1 < argc) {
      const std::string hook = argv[++i];
      if (hook == "allreduce") {
        c.hook = true;
      } else if (hook.rfind("powersgd:", 0) == 0 && std::stoi(hook.substr(9)) > 0) {
        c.powersgd_rank = std::stoi(hook.substr(9));
      } else {
        std::fprintf(stderr, "ddp_step_bench: --comm-hook is allreduce or powersgd:RANK, not %s\n", hook.c_str());
        return 2;
      }
    } else if (flag == "--sync-bn") c.sync_bn = true;
    else if (flag == "--bucket-view") c.bucket_view = true;
    else if (flag == "--lockstep") c.lockstep = true;
    else if (flag == "--trace" && i + 1 < argc) {
      c.trace = argv[++i];
#ifndef DDP_BENCH_TRACE
      std::fprintf(stderr, "ddp_step_bench: --trace needs LibTorch 2.x (its profiler's C++ API); this is %s\n",
                   TORCH_VERSION);
      return 2;
#endif
    } else {
      std::fprintf(stderr, "ddp_step_bench: unknown argument %s\n", flag.c_str());
      return 2;
    }
  }
  if (device != "cpu" && device != "cuda") {
    std::fprintf(stderr, "ddp_step_bench: --device is cpu or cuda, not %s\n", device.c_str());
    return 2;
  }
  if (device == "cuda" && !torch::cuda::is_available()) {
    std::fprintf(stderr,
                 "ddp_step_bench: --device cuda, but LibTorch sees no CUDA device (CPU-only LibTorch, or no GPU)\n");
    return 3;
  }
  if (model == "resnet50" && !batch_given) c.batch = 32;
  if (backend.empty()) backend = device == "cuda" ? "nccl" : "gloo";
  torch::manual_seed(0);
  if (device == "cpu") torch::set_num_threads(1);
  ddp::init_process_group(backend);
  if (device == "cuda") {
    c.device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(ddp::get_local_rank()));
    at::globalContext().setBenchmarkCuDNN(true);
  }
  double ms = 0;
  if (model == "cnn") ms = run<Cnn>(c, torch::randn({c.batch, 1, 28, 28}), 10);
  else if (model == "fashion") ms = run<NetImpl>(c, torch::randn({c.batch, 1, 28, 28}), 10);
  else if (model == "resnet50") ms = run<ResNet50>(c, torch::randn({c.batch, 3, 224, 224}), 1000);
  else ms = run<Mlp>(c, torch::randn({c.batch, 1, 28, 28}), 10);
  if (ddp::get_rank() == 0) std::printf("%.3f\n", ms);
  ddp::destroy_process_group();
  return 0;
}
