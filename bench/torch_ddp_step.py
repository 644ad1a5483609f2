"""PyTorch's DistributedDataParallel step, timed as ddp_step_bench.cpp times ddp's. Run one
process per rank with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set (run_ddp_step.py does).
    torch_ddp_step.py --model mlp|cnn [--no-ddp] [--steps N] [--batch B]
Prints "<median step ms>" on rank 0."""
import argparse
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


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="mlp")
    parser.add_argument("--no-ddp", action="store_true")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    dist.init_process_group("gloo")
    model = Mlp() if args.model == "mlp" else Cnn()
    if not args.no_ddp:
        model = nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(args.batch, 1, 28, 28), torch.randint(0, 10, (args.batch,))
    times = []
    for i in range(args.steps + 5):
        dist.barrier()
        start = time.perf_counter()
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
        if i >= 5:
            times.append((time.perf_counter() - start) * 1000)
    times.sort()
    if dist.get_rank() == 0:
        print("%.3f" % times[len(times) // 2], flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
