#!/usr/bin/python3
"""Golden partitions for ddp::ZeroRedundancyOptimizer, computed by PyTorch 1.13's own
ZeroRedundancyOptimizer._partition_parameters.

    /usr/bin/python3 tests/torch/zero/make_golden.py      # rewrites golden/partition.txt

The method needs only the parameter groups and the world size, so it runs here on an object that
has just those (no process group). Each line: a case, then the partition:
    world | sizes of group 0 | sizes of group 1 ... : rank 0's indices per group | rank 1's ...
with the indices of a group separated by commas and the groups of a rank by '/'.
"""
import os
import random

import torch
from torch.distributed.optim import ZeroRedundancyOptimizer

HERE = os.path.dirname(os.path.abspath(__file__))


def partition(world, groups):
    zero = ZeroRedundancyOptimizer.__new__(ZeroRedundancyOptimizer)
    zero.world_size = world
    zero._partition_parameters_cache = []
    zero.param_groups = [{"params": [torch.empty(n) for n in sizes], "lr": 0.1} for sizes in groups]
    index = {id(p): i for g in zero.param_groups for i, p in enumerate(g["params"])}
    result = zero._partition_parameters()
    return [[[index[id(p)] for p in g["params"]] for g in rank_groups] for rank_groups in result]


def cases():
    mlp = [[1280, 64, 2048, 32, 160, 5]]               # tests' MLP 20-64-32-5
    cnn = [[288, 32, 32, 32, 18432, 64, 64, 64, 200704, 64, 640, 10]]  # the example's Net
    yield from ((w, mlp) for w in (1, 2, 3, 4))
    yield from ((w, cnn) for w in (2, 3, 5))
    yield 3, [[10, 10, 10, 10, 10, 10, 10]]             # ties keep their order
    yield 4, [[7, 3], [100, 1, 1, 50], [2]]              # running totals across groups
    yield 5, [[1, 2]]                                    # more ranks than parameters
    yield 2, [[], [4, 4]]                                # an empty group
    rng = random.Random(16)
    for _ in range(12):
        groups = [[rng.choice([1, 2, 3, 8, 8, 64, 100, 1000]) for _ in range(rng.randint(1, 9))]
                  for _ in range(rng.randint(1, 3))]
        yield rng.randint(1, 6), groups


def main():
    lines = []
    for world, groups in cases():
        result = partition(world, groups)
        left = " | ".join([str(world)] + [",".join(map(str, g)) for g in groups])
        right = " | ".join("/".join(",".join(map(str, g)) for g in rank) for rank in result)
        lines.append(left + " : " + right)
    with open(os.path.join(HERE, "golden", "partition.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
