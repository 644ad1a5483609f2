"""PyTorch's torch.distributed gloo all_reduce, timed as allreduce_bench.cpp times ddp's.
Run one process per rank with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set (see
run_allreduce.py). Prints "<bytes> <median microseconds per op>" per size."""
import os
import sys
import time

import torch
import torch.distributed as dist


def main():
    min_bytes, max_bytes, repeats = 4 << 10, 256 << 20, 5
    args = sys.argv[1:]
    for flag, value in zip(args[::2], args[1::2]):
        if flag == "--min-bytes":
            min_bytes = int(value)
        elif flag == "--max-bytes":
            max_bytes = int(value)
        elif flag == "--repeats":
            repeats = int(value)
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    data = torch.ones(max_bytes // 4)
    size = min_bytes
    while size <= max_bytes:
        count = size // 4
        view = data[:count]
        iters = max(3, min(200, (64 << 20) // size))
        for _ in range(max(2, iters // 10)):
            dist.all_reduce(view)
        per_op = []
        for _ in range(repeats):
            dist.barrier()
            start = time.perf_counter()
            for _ in range(iters):
                dist.all_reduce(view)
            per_op.append((time.perf_counter() - start) / iters * 1e6)
        per_op.sort()
        if dist.get_rank() == 0:
            print(size, "%.2f" % per_op[len(per_op) // 2], flush=True)
        size *= 4
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
