# A PyTorch DDP job (gloo) for ddprun's interop test. Each rank trains on its own data; the
# result must equal a single-process reference trained on every rank's data together, and the
# parameters must be identical on every rank.
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def batch(rank, step):
    g = torch.Generator().manual_seed(1000 + 17 * rank + step)
    return torch.randn(8, 4, generator=g), torch.randn(8, 2, generator=g)


def model():
    torch.manual_seed(0)
    return torch.nn.Linear(4, 2)


dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
net = model()
ddp = DDP(net)
opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
for step in range(3):
    x, y = batch(rank, step)
    opt.zero_grad()
    ((ddp(x) - y) ** 2).mean().backward()
    opt.step()

reference = model()
ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
for step in range(3):
    xs, ys = zip(*(batch(r, step) for r in range(world)))
    ref_opt.zero_grad()
    ((reference(torch.cat(xs)) - torch.cat(ys)) ** 2).mean().backward()
    ref_opt.step()

flat = torch.cat([p.detach().flatten() for p in net.parameters()])
gathered = [torch.zeros_like(flat) for _ in range(world)]
dist.all_gather(gathered, flat)
same = all(torch.equal(g, gathered[0]) for g in gathered)
ref_flat = torch.cat([p.detach().flatten() for p in reference.parameters()])
matches = torch.allclose(flat, ref_flat, atol=1e-6)
print(f"ddp rank={rank} world={world} same={same} matches_reference={matches} "
      f"local_rank={os.environ['LOCAL_RANK']}", flush=True)
dist.destroy_process_group()
