#!/usr/bin/env python3
"""PyTorch's own DDP (gloo) on a fixed problem, for ddp's bit-exactness test
(tests/torch/ddp/ddp_pytorch_parity_test.cpp builds the same problem in C++).

    /usr/bin/python3 pytorch_ddp_peer.py --world 2 --out FILE [--bucket-view]

Starts `world` ranks on this machine. Each trains an MLP 20-64-5 (weights: torch.manual_seed(0),
then randn * 0.3 per parameter in registration order) for 3 steps of SGD (lr 0.1) on its own data
(seed 1000 + 17 * rank + step: x randn 8x20, y randn 8x5), loss mean((out - y)^2). Rank 0 writes
the final parameters, then the last step's averaged gradients, as raw float32. --bucket-view
constructs DDP with gradient_as_bucket_view=True.
"""
import argparse
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from peer_ranks import run_ranks  # noqa: E402


def model():
    net = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 5))
    torch.manual_seed(0)
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.randn(p.shape) * 0.3)
    return net


def rank_main(out, bucket_view):
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    net = model()
    ddp = DDP(net, gradient_as_bucket_view=bucket_view)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    for step in range(3):
        torch.manual_seed(1000 + 17 * rank + step)
        x, y = torch.randn(8, 20), torch.randn(8, 5)
        opt.zero_grad()
        ((ddp(x) - y) ** 2).mean().backward()
        opt.step()
    if rank == 0:
        params = [p.detach().flatten() for p in net.parameters()]
        grads = [p.grad.flatten() for p in net.parameters()]
        with open(out, "wb") as f:
            f.write(torch.cat(params + grads).numpy().tobytes())
    # No teardown: PyTorch 2.15's gloo group, destroyed after DDP's last all-reduce, aborts now and then
    # ("terminate called without an active exception", once in about 25 runs here; powersgd_peer.py saw
    # the same with 1.13). Every collective has completed on every rank once the barrier returns.
    dist.barrier()
    os._exit(0)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--out", required=True)
    parser.add_argument("--rank", type=int, default=-1)
    parser.add_argument("--bucket-view", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.rank >= 0:
        return rank_main(args.out, args.bucket_view)
    print("PyTorch", torch.__version__, flush=True)  # the test demands every bit from the linked release
    run_ranks(__file__, args.world, ["--world", str(args.world), "--out", args.out]
              + (["--bucket-view"] if args.bucket_view else []), 120)

if __name__ == "__main__":
    main()
