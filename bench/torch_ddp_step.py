"""PyTorch's DistributedDataParallel step, timed as ddp_step_bench.cpp times ddp's. Run one
process per rank with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set (run_ddp_step.py and
scripts/gpu_check.sh do).
    torch_ddp_step.py --model mlp|cnn|resnet50 [--no-ddp] [--steps N] [--batch B] [--device cpu|cuda]
                      [--powersgd-rank R]
Prints "<median step ms>" on rank 0. On the CPU each rank uses one intra-op thread and gloo; with
--device cuda, the GPU of LOCAL_RANK and nccl, with a device synchronization ending each step.
--powersgd-rank R registers PyTorch's powerSGD_hook as ddp_step_bench's --comm-hook powersgd:R
does (error feedback, warm start, compressing from the second step)."""
import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(784, 1024), nn.Linear(1024, 1024), nn.Linear(1024, 10)

    def forward(self, x):
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x.flatten(1))))))


class Cnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(1, 32, 3), nn.Conv2d(32, 64, 3)
        self.fc1, self.fc2 = nn.Linear(9216, 128), nn.Linear(128, 10)

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.conv2(F.relu(self.conv1(x)))), 2)
        return self.fc2(F.relu(self.fc1(h.flatten(1))))


def conv(cin, cout, kernel, stride=1):
    return nn.Conv2d(cin, cout, kernel, stride=stride, padding=kernel // 2, bias=False)


class Bottleneck(nn.Module):
    def __init__(self, cin, width, stride):
        super().__init__()
        out = width * 4
        self.conv1, self.bn1 = conv(cin, width, 1), nn.BatchNorm2d(width)
        self.conv2, self.bn2 = conv(width, width, 3, stride), nn.BatchNorm2d(width)
        self.conv3, self.bn3 = conv(width, out, 1), nn.BatchNorm2d(out)
        self.downsample = (nn.Sequential(conv(cin, out, 1, stride), nn.BatchNorm2d(out))
                           if stride != 1 or cin != out else None)

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = F.relu(self.bn2(self.conv2(h)))
        h = self.bn3(self.conv3(h))
        return F.relu(h + (self.downsample(x) if self.downsample is not None else x))


class ResNet50(nn.Module):
    """torchvision's layout (bottlenecks 3-4-6-3), without needing torchvision."""

    def __init__(self):
        super().__init__()
        self.conv1, self.bn1 = conv(3, 64, 7, 2), nn.BatchNorm2d(64)
        layers, cin = [], 64
        for stage, blocks in enumerate((3, 4, 6, 3)):
            width = 64 << stage
            mods = []
            for b in range(blocks):
                mods.append(Bottleneck(cin, width, 2 if b == 0 and stage > 0 else 1))
                cin = width * 4
            layers.append(nn.Sequential(*mods))
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.fc = nn.Linear(2048, 1000)

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, 2, 1)
        h = self.layer4(self.layer3(self.layer2(self.layer1(h))))
        return self.fc(F.adaptive_avg_pool2d(h, 1).flatten(1))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="mlp")
    parser.add_argument("--no-ddp", action="store_true")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch", type=int, default=None)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--powersgd-rank", type=int, default=0)
    args = parser.parse_args()
    cuda = args.device == "cuda"
    batch = args.batch or (32 if args.model == "resnet50" else 64)
    torch.manual_seed(0)
    if cuda:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
        torch.backends.cudnn.benchmark = True
        dist.init_process_group("nccl")
    else:
        device = torch.device("cpu")
        torch.set_num_threads(1)
        dist.init_process_group("gloo")
    model = {"mlp": Mlp, "cnn": Cnn, "resnet50": ResNet50}[args.model]().to(device)
    if not args.no_ddp:
        model = nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if cuda else None)
        if args.powersgd_rank > 0:
            from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd
            state = powersgd.PowerSGDState(process_group=None, matrix_approximation_rank=args.powersgd_rank,
                                           start_powerSGD_iter=2)
            model.register_comm_hook(state, powersgd.powerSGD_hook)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    shape = (batch, 3, 224, 224) if args.model == "resnet50" else (batch, 1, 28, 28)
    classes = 1000 if args.model == "resnet50" else 10
    x, y = torch.randn(*shape).to(device), torch.randint(0, classes, (batch,)).to(device)
    times = []
    for i in range(args.steps + 5):
        dist.barrier()
        if cuda:
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
        if cuda:
            torch.cuda.synchronize(device)
        if i >= 5:
            times.append((time.perf_counter() - start) * 1000)
    times.sort()
    if dist.get_rank() == 0:
        print("%.3f" % times[len(times) // 2], flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
