#!/usr/bin/python3
"""Golden vectors for ddp::DistributedSampler, computed by PyTorch itself.

    /usr/bin/python3 tests/torch/sampler/make_golden.py            # rewrites golden/*.txt
    /usr/bin/python3 tests/torch/sampler/make_golden.py --cases F  # answers the cases in F on stdout

Sampler lines: the case, then what torch.utils.data.distributed.DistributedSampler yields for it:
    n num_replicas rank seed epoch shuffle drop_last : len hash first...
`len` is len(sampler), `hash` an FNV-1a-style digest of every index (h ^= x; h *= 1099511628211,
modulo 2^64, from 14695981039346656037), `first` the first min(len, 24) indices. A --cases file holds
one case (the seven numbers) per line; the answers use the same line format.

randperm.txt holds what the C++ side cannot get from this PyTorch (1.13) directly:
    random64 seed : v1 v2 ...      torch's 64-bit draws (random_ over the full int64 range, as uint64)
    inside_out64 n seed : len hash first...
                                   PyTorch 2.7's randperm loop for large n (z = random64() % (i + 1);
                                   p[i] = p[z]; p[z] = i), run here on those same draws at small n.
"""
import os
import sys

import torch
from torch.utils.data.distributed import DistributedSampler

MASK = (1 << 64) - 1
HEAD = 24
HERE = os.path.dirname(os.path.abspath(__file__))


def digest(values):
    h = 14695981039346656037
    for x in values:
        h = ((h ^ (x & MASK)) * 1099511628211) & MASK
    return h


def summary(values):
    return " ".join(str(v) for v in [len(values), digest(values)] + list(values[:HEAD]))


def sampler_line(n, replicas, rank, seed, epoch, shuffle, drop_last):
    sampler = DistributedSampler(range(n), num_replicas=replicas, rank=rank, shuffle=bool(shuffle),
                                 seed=seed, drop_last=bool(drop_last))
    sampler.set_epoch(epoch)
    indices = list(iter(sampler))
    assert len(indices) == len(sampler)
    return "%d %d %d %d %d %d %d : %s" % (n, replicas, rank, seed, epoch, shuffle, drop_last, summary(indices))


def sampler_cases():
    pairs_small = [(0, 0), (0, 1), (42, 0), (42, 7), (2**32 + 3, 2), (2**63 + 11, 1)]
    for n in [0, 1, 2, 3, 5, 7, 10, 16, 17]:
        for replicas in [1, 2, 3, 4, 8]:
            ranks = range(replicas) if replicas <= 4 else [0, 3, replicas - 1]
            for rank in ranks:
                for seed, epoch in pairs_small:
                    for shuffle in (1, 0):
                        for drop_last in (0, 1):
                            yield n, replicas, rank, seed, epoch, shuffle, drop_last
    for n in [100, 1001, 60000, 65537]:
        for replicas in [1, 2, 3, 7]:
            for rank in sorted({0, replicas - 1}):
                for seed, epoch in [(0, 0), (0, 3), (1234567, 1)]:
                    for shuffle in (1, 0):
                        for drop_last in (0, 1):
                            yield n, replicas, rank, seed, epoch, shuffle, drop_last


def random64(seed, count):
    g = torch.Generator()
    g.manual_seed(seed)
    draws = torch.empty(count, dtype=torch.int64).random_(-2**63, None, generator=g)
    return [int(v) & MASK for v in draws.tolist()]


def inside_out64(n, seed):
    draws = random64(seed, n)
    perm = [0] * n
    for i in range(n):
        z = draws[i] % (i + 1)
        perm[i] = perm[z]
        perm[z] = i
    return perm


def write_golden():
    os.makedirs(os.path.join(HERE, "golden"), exist_ok=True)
    with open(os.path.join(HERE, "golden", "distributed_sampler.txt"), "w") as out:
        out.write("# torch %s: make_golden.py, n num_replicas rank seed epoch shuffle drop_last : len hash first...\n"
                  % torch.__version__)
        for case in sampler_cases():
            out.write(sampler_line(*case) + "\n")
    with open(os.path.join(HERE, "golden", "randperm.txt"), "w") as out:
        out.write("# torch %s: make_golden.py, random64 seed : draws | inside_out64 n seed : len hash first...\n"
                  % torch.__version__)
        for seed in [0, 1, 42, 2**32 + 3, 2**63 + 11]:
            out.write("random64 %d : %s\n" % (seed, " ".join(str(v) for v in random64(seed, 8))))
        for n in [0, 1, 2, 3, 10, 100, 1000, 100000]:
            for seed in [0, 1, 42, 2**40 + 5]:
                out.write("inside_out64 %d %d : %s\n" % (n, seed, summary(inside_out64(n, seed))))


def answer_cases(path):
    with open(path) as cases:
        for line in cases:
            fields = line.split()
            if fields:
                print(sampler_line(*(int(f) for f in fields)))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--cases":
        answer_cases(sys.argv[2])
    elif len(sys.argv) == 1:
        write_golden()
    else:
        sys.exit(__doc__)
