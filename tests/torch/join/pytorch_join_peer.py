#!/usr/bin/env python3
"""PyTorch's own DDP with Join (gloo, CPU) on uneven inputs, for ddp's join parity test
(tests/torch/join/join_pytorch_parity_test.cpp builds the same problems in C++).

    /usr/bin/python3 pytorch_join_peer.py --out DIR

Starts 3 ranks on this machine and runs every configuration of CONFIGS in them (the 2-rank ones
on a group of ranks 0 and 1; rank 2 waits), one Python start for all. Each configuration trains
Net (weights: torch.manual_seed(0), then randn * 0.3 per parameter in registration order) with
SGD (lr 0.1, momentum 0.9) inside Join; rank r has batches[r] batches, batch s of rank r being
x = randn(4 + r, 10), y = randn(4 + r, 3) after torch.manual_seed(5000 + 100 * c + 10 * r + s)
(c: the configuration's index), loss mean((out - y)^2). Rank 0 writes DIR/<name>.bin: the final
parameters, then the buffers as float32, in registration order.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from peer_ranks import run_ranks  # noqa: E402

torch = dist = Join = DDP = None  # imported by the ranks only: the launcher need not pay for it

# name, world size, batches per rank, divide_by_initial_world_size, with an unused layer
# (find_unused_parameters). The C++ test lists the same.
CONFIGS = [
    ("w2_initial", 2, [4, 2], True, False),
    ("w2_training", 2, [4, 2], False, False),
    ("w2_none_initial", 2, [0, 3], True, False),
    ("w3_initial", 3, [3, 0, 5], True, False),
    ("w3_training", 3, [3, 0, 5], False, False),
    ("w3_unused_training", 3, [2, 5, 1], False, True),
]


def model(with_unused):
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = torch.nn.Linear(10, 16)
            self.bn = torch.nn.BatchNorm1d(16)
            self.fc2 = torch.nn.Linear(16, 3)
            self.unused = torch.nn.Linear(16, 3) if with_unused else None

        def forward(self, x):
            return self.fc2(torch.relu(self.bn(self.fc1(x))))

    net = Net()
    torch.manual_seed(0)
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.randn(p.shape) * 0.3)
    return net


def run(index, config, group, rank, out_dir):
    name, _, batches, divide, with_unused = config
    net = model(with_unused)
    ddp = DDP(net, process_group=group, find_unused_parameters=with_unused)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    with Join([ddp], divide_by_initial_world_size=divide):
        for step in range(batches[rank]):
            torch.manual_seed(5000 + 100 * index + 10 * rank + step)
            x, y = torch.randn(4 + rank, 10), torch.randn(4 + rank, 3)
            opt.zero_grad()
            ((ddp(x) - y) ** 2).mean().backward()
            opt.step()
    if rank == 0:
        parts = [p.detach().flatten() for p in net.parameters()]
        parts += [b.detach().float().flatten() for b in net.buffers()]
        with open(os.path.join(out_dir, name + ".bin"), "wb") as f:
            f.write(torch.cat(parts).numpy().tobytes())


def rank_main(out_dir):
    global torch, dist, Join, DDP
    import torch
    import torch.distributed as dist
    from torch.distributed.algorithms.join import Join
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    pair = dist.new_group([0, 1])
    for index, config in enumerate(CONFIGS):
        if config[1] == 2 and rank == 2:
            continue
        run(index, config, pair if config[1] == 2 else dist.group.WORLD, rank, out_dir)
    dist.barrier()
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--rank", type=int, default=-1)
    args = parser.parse_args()
    if args.rank >= 0:
        return rank_main(args.out)
    run_ranks(__file__, 3, ["--out", args.out], 150)

if __name__ == "__main__":
    main()
