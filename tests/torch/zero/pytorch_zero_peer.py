#!/usr/bin/env python3
"""PyTorch's own ZeroRedundancyOptimizer (Adam, over gloo, with DDP) on a fixed problem, for
ddp's parity test (tests/torch/zero/zero_pytorch_parity_test.cpp builds the same problem in C++).

    /usr/bin/python3 pytorch_zero_peer.py --worlds 2 3 --steps 10 --out PREFIX

For each world size, forks that many ranks (one Python start for every run). Each trains an MLP
20-64-32-5 (weights: torch.manual_seed(0), then randn * 0.3 per parameter in registration order)
wrapped in DDP, with ZeroRedundancyOptimizer(optimizer_class=Adam, lr=0.01), on its own data
(seed 1000 + 17 * rank + step: x randn 8x20, y randn 8x5), loss mean((out - y)^2). Rank 0 writes
PREFIX-w<world>.bin, the final parameters as raw float32, and PREFIX-w<world>.txt, the partition:
one line per rank with the indices (in model.parameters() order) of the parameters it updates.
"""
import argparse
import multiprocessing
import os
import socket
import sys

import torch
import torch.distributed as dist
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP


def model():
    net = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 32), torch.nn.ReLU(),
                              torch.nn.Linear(32, 5))
    torch.manual_seed(0)
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.randn(p.shape) * 0.3)
    return net


def rank_main(rank, world, port, steps, prefix):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank, world_size=world)
    net = model()
    ddp = DDP(net)
    zero = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.Adam, lr=0.01)
    for step in range(steps):
        torch.manual_seed(1000 + 17 * rank + step)
        x, y = torch.randn(8, 20), torch.randn(8, 5)
        zero.zero_grad()
        ((ddp(x) - y) ** 2).mean().backward()
        zero.step()
    if rank == 0:
        params = list(net.parameters())
        with open("%s-w%d.bin" % (prefix, world), "wb") as f:
            f.write(torch.cat([p.detach().flatten() for p in params]).numpy().tobytes())
        index = {id(p): i for i, p in enumerate(params)}
        with open("%s-w%d.txt" % (prefix, world), "w") as f:
            for groups in zero._partition_parameters():
                f.write(" ".join(str(index[id(p)]) for g in groups for p in g["params"]) + "\n")
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--worlds", type=int, nargs="+", default=[2, 3])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    fork = multiprocessing.get_context("fork")  # no second interpreter start per rank
    for world in args.worlds:
        port = free_port()
        procs = [fork.Process(target=rank_main, args=(rank, world, port, args.steps, args.out)) for rank in range(world)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout=120)
        codes = [p.exitcode for p in procs]
        if any(codes):
            sys.exit("PyTorch ranks failed at world size %d: exit codes %s" % (world, codes))


if __name__ == "__main__":
    main()
