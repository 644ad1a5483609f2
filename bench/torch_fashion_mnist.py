"""The main job's PyTorch twin (examples/fashion_mnist): the same CNN (net.py), data and
normalization, DistributedSampler shards reshuffled every epoch, SGD (momentum 0.9, weight decay
5e-4) with the same cosine schedule over the samples the job has consumed, batch 64 per rank,
--amp as the example's (float16 autocast with a GradScaler on CUDA, bfloat16 on the CPU), and the
same reports: loss and test accuracy reduced over every rank, seconds and images per second per
epoch, the whole run's seconds last. For a side-by-side comparison with the example on the same
machine: under torchrun, ddprun or alone (a group of one).

    ddprun --nproc_per_node=gpu python3 bench/torch_fashion_mnist.py            # one process per GPU, nccl
    ddprun --nproc_per_node=2 /usr/bin/python3 bench/torch_fashion_mnist.py     # CPU, gloo

The last line is machine-readable: "total_seconds S test_accuracy A".
"""
import argparse
import gzip
import math
import os
import struct
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "fashion_mnist"))
from net import Net  # noqa: E402

MEAN, STD = 0.2860, 0.3530


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    magic = struct.unpack(">I", data[:4])[0]
    dims = struct.unpack(">" + "I" * (magic & 0xFF), data[4:4 + 4 * (magic & 0xFF)])
    return torch.frombuffer(bytearray(data[4 + 4 * len(dims):]), dtype=torch.uint8).view(*dims)


def load(root, prefix):
    def find(name):
        for candidate in (name + ".gz", name):
            if os.path.exists(os.path.join(root, candidate)):
                return os.path.join(root, candidate)
        sys.exit("torch_fashion_mnist: no %s(.gz) in %s" % (name, root))

    images = read_idx(find(prefix + "-images-idx3-ubyte")).float().div_(255).sub_(MEAN).div_(STD).unsqueeze(1)
    labels = read_idx(find(prefix + "-labels-idx1-ubyte")).long()
    return images, labels


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--amp", action="store_true")
    parser.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    args = parser.parse_args()

    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = torch.cuda.is_available() and args.device != "cpu"
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    if world > 1:
        dist.init_process_group("nccl" if cuda else "gloo")

    train_x, train_y = load(args.data_dir, "train")
    test_x, test_y = load(args.data_dir, "t10k")
    torch.manual_seed(args.seed)
    model = Net().to(device)
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank] if cuda else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-4)
    scaler = torch.cuda.amp.GradScaler(enabled=args.amp and cuda)
    sampler = torch.utils.data.distributed.DistributedSampler(
        torch.utils.data.TensorDataset(train_x, train_y), num_replicas=world, rank=rank, shuffle=True, seed=args.seed)
    total_samples = args.epochs * len(sampler) * world
    consumed = 0

    def reduced(values):
        t = torch.tensor(values, dtype=torch.float64, device=device)
        if world > 1:
            dist.all_reduce(t)
        return t.tolist()

    start = time.perf_counter()
    accuracy = 0.0
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        indices = torch.tensor(list(iter(sampler)))
        epoch_start = time.perf_counter()
        loss_sum, batches = 0.0, 0
        model.train()
        for first in range(0, len(indices), args.batch_size):
            idx = indices[first:first + args.batch_size]
            x, y = train_x[idx].to(device, non_blocking=True), train_y[idx].to(device, non_blocking=True)
            with torch.autocast(device.type, dtype=torch.float16 if cuda else torch.bfloat16, enabled=args.amp):
                loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            consumed += len(idx) * world
            progress = min(1.0, consumed / max(total_samples, 1))
            for group in optimizer.param_groups:
                group["lr"] = args.lr * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * progress)))
            loss_sum += loss.item()
            batches += 1
        train_seconds = time.perf_counter() - epoch_start
        model.eval()
        correct, counted = 0.0, 0.0
        with torch.no_grad():
            for first in range(rank, len(test_x), world * 1000):  # each rank its own slice of the test set
                x = test_x[first:first + 1000 * world:world].to(device)
                y = test_y[first:first + 1000 * world:world].to(device)
                correct += model(x).argmax(1).eq(y).sum().item()
                counted += len(y)
        loss_total, batch_total, correct, counted = reduced([loss_sum, batches, correct, counted])
        accuracy = correct / counted
        if rank == 0:
            print("epoch %d: loss %.4f, test accuracy %.2f%%, %.1f s, %.0f img/s" % (
                epoch + 1, loss_total / batch_total, 100 * accuracy, train_seconds,
                len(indices) * world / train_seconds), flush=True)
    total = time.perf_counter() - start
    if rank == 0:
        print("total_seconds %.2f test_accuracy %.4f" % (total, accuracy), flush=True)
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
