"""PyTorch's torch.distributed gloo all_reduce, timed as allreduce_bench.cpp times ddp's.
Run one process per rank with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set (see
run_allreduce.py). Prints "<bytes> <median microseconds per op>" per size. --op times broadcast,
all_gather (the bytes are the output) or reduce_scatter instead, as allreduce_bench.cpp does;
PyTorch 1.13's gloo has no reduce_scatter, which exits with status 3 saying so."""
import os
import sys
import time

import torch
import torch.distributed as dist


def main():
    min_bytes, max_bytes, repeats, op = 4 << 10, 256 << 20, 5, "all_reduce"
    args = sys.argv[1:]
    for flag, value in zip(args[::2], args[1::2]):
        if flag == "--min-bytes":
            min_bytes = int(value)
        elif flag == "--max-bytes":
            max_bytes = int(value)
        elif flag == "--repeats":
            repeats = int(value)
        elif flag == "--op":
            op = value
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    if op == "reduce_scatter":
        sys.exit(3)  # ProcessGroupGloo does not support reduce_scatter (PyTorch 1.13)
    data = torch.ones(max_bytes // 4)
    other = torch.ones(max_bytes // 4)
    world = dist.get_world_size()

    def run(view):
        if op == "all_reduce":
            dist.all_reduce(view)
        elif op == "broadcast":
            dist.broadcast(view, 0)
        elif op == "all_gather":
            part = view.numel() // world
            dist.all_gather(list(view[:part * world].split(part)), other[:part])
        else:
            raise SystemExit("torch_allreduce.py: unknown --op " + op)
    size = min_bytes
    while size <= max_bytes:
        count = size // 4
        view = data[:count]
        iters = max(3, min(200, (64 << 20) // size))
        for _ in range(max(2, iters // 10)):
            run(view)
        per_op = []
        for _ in range(repeats):
            dist.barrier()
            start = time.perf_counter()
            for _ in range(iters):
                run(view)
            per_op.append((time.perf_counter() - start) / iters * 1e6)
        per_op.sort()
        if dist.get_rank() == 0:
            print(size, "%.2f" % per_op[len(per_op) // 2], flush=True)
        size *= 4
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
