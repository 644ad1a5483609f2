#!/usr/bin/python3
"""Golden scale sequences for ddp::amp::GradScaler, computed by PyTorch 1.13's own GradScaler class.

    /usr/bin/python3 tests/torch/amp/make_golden.py      # rewrites golden/grad_scaler.txt
    PYTHON tests/torch/amp/make_golden.py --print        # the same lines on stdout, under any PyTorch

PyTorch 2.3 and later run GradScaler on the CPU (torch.amp.GradScaler("cpu"), with CPU kernels): there
the script runs that, unchanged, and grad_scaler_test.cpp compares ddp with it live. The golden file
stays PyTorch 1.13's, made as follows.

PyTorch 1.13's GradScaler runs only on CUDA: its two kernels, _amp_foreach_non_finite_check_and_unscale_
and _amp_update_scale_, have no CPU implementation in 1.13 ("Could not run 'aten::_amp_update_scale_'
with arguments from the 'CPU' backend"). So this script runs PyTorch's GradScaler class itself (its
stages, its found-inf bookkeeping, step skipping and update) on CPU tensors, with the two kernels
written here from their CUDA source's documented semantics:

  _amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale):
      found_inf = 1 if any element of any grad is inf or NaN; every grad *= inv_scale
  _amp_update_scale_(scale, growth_tracker, found_inf, growth_factor, backoff_factor, growth_interval):
      if found_inf: scale = float32(scale * backoff_factor); growth_tracker = 0
      else: successful = growth_tracker + 1
            if successful == growth_interval:
                new = float32(scale * growth_factor); scale = new if finite; growth_tracker = 0
            else: growth_tracker = successful
  (the products in double, as the kernel's float * double, rounded to float32 when stored)

Each line: a case, then what happened at each iteration:
    init_scale growth_factor backoff_factor growth_interval pattern : stepped/scale/tracker ...
`pattern` has one letter per iteration: f (finite gradients), i (an inf in one gradient),
n (a NaN), u (unscale_ called before step), 2 (two optimizers, the second with an inf).
`stepped` is 1 when the first optimizer's step ran; scale (as float32, printed with repr of the
float) and tracker are the values after update().
"""
import math
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
NATIVE_CPU = hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler")  # 2.3+


def check_and_unscale(grads, found_inf, inv_scale):
    for g in grads:
        if not torch.isfinite(g).all():
            found_inf.fill_(1.0)
        g.mul_(inv_scale)


def update_scale(scale, growth_tracker, found_inf, growth_factor, backoff_factor, growth_interval):
    s = float(scale.item())
    if found_inf.item():
        scale.fill_(float(np.float32(s * backoff_factor)))
        growth_tracker.fill_(0)
    else:
        successful = int(growth_tracker.item()) + 1
        if successful == growth_interval:
            with np.errstate(over="ignore"):
                new = np.float32(s * growth_factor)
            if math.isfinite(new):
                scale.fill_(float(new))
            growth_tracker.fill_(0)
        else:
            growth_tracker.fill_(successful)
    return scale


def cuda_scaler(init_scale, growth, backoff, interval):
    """1.13's CUDA-only GradScaler class on CPU tensors, with the two kernels above."""
    from torch.cuda.amp import grad_scaler

    class CpuReplicator(grad_scaler._MultiDeviceReplicator):
        def __init__(self, master_tensor):  # the original asserts a CUDA tensor
            self.master = master_tensor
            self._per_device_tensors = {}

    grad_scaler.amp_definitely_not_available = lambda: False
    grad_scaler._MultiDeviceReplicator = CpuReplicator
    torch._amp_foreach_non_finite_check_and_unscale_ = check_and_unscale
    torch._amp_update_scale_ = update_scale
    scaler = grad_scaler.GradScaler(init_scale=init_scale, growth_factor=growth, backoff_factor=backoff,
                                    growth_interval=interval)
    scaler._lazy_init_scale_growth_tracker(torch.device("cpu"))  # scale() itself asserts CUDA
    return scaler


def run(init_scale, growth, backoff, interval, pattern):
    if NATIVE_CPU:
        scaler = torch.amp.GradScaler("cpu", init_scale=init_scale, growth_factor=growth, backoff_factor=backoff,
                                      growth_interval=interval)
    else:
        scaler = cuda_scaler(init_scale, growth, backoff, interval)
    w = torch.nn.Parameter(torch.ones(3))
    v = torch.nn.Parameter(torch.ones(2))
    first, second = torch.optim.SGD([w], lr=0.1), torch.optim.SGD([v], lr=0.1)
    out = []
    for letter in pattern:
        first.zero_grad()
        second.zero_grad()
        before = w.detach().clone()
        loss = (w * 2).sum() + (v * 3).sum()
        (scaler.scale(loss) if NATIVE_CPU else loss * scaler._scale).sum().backward()
        with torch.no_grad():
            if letter == "i":
                w.grad[1] = float("inf")
            elif letter == "n":
                w.grad[0] = float("nan")
            elif letter == "2":
                v.grad[0] = float("inf")
        if letter == "u":
            scaler.unscale_(first)
        scaler.step(first)
        if letter == "2":
            scaler.step(second)
        scaler.update()
        stepped = int(not torch.equal(before, w.detach()))
        out.append("%d/%r/%d" % (stepped, float(scaler.get_scale()), scaler._get_growth_tracker()))
    return out


CASES = [
    (65536.0, 2.0, 0.5, 2000, "fffiffnff"),
    (65536.0, 2.0, 0.5, 3, "ffffffffiffffnfff"),
    (1024.0, 2.0, 0.5, 2, "fufififfuff2ff"),
    (1.0, 1.7, 0.3, 2, "ffffffiffffiiffff"),
    (3.0e38, 2.0, 0.5, 1, "fffifff"),
    (1.0e-30, 1.5, 0.25, 1, "iiiifffii"),
    (65536.0, 2.0, 0.5, 1, "i2ffnf"),
    (1.0e38, 4.0, 0.5, 1, "ffif"),
]


def main():
    lines = []
    for init_scale, growth, backoff, interval, pattern in CASES:
        results = run(init_scale, growth, backoff, interval, pattern)
        lines.append("%r %r %r %d %s : %s" % (init_scale, growth, backoff, interval, pattern, " ".join(results)))
    if "--print" in sys.argv[1:]:
        print("# PyTorch %s: %s" % (torch.__version__, 'torch.amp.GradScaler("cpu")' if NATIVE_CPU
                                    else "torch.cuda.amp.GradScaler on CPU tensors, with make_golden.py's kernels"))
        print("\n".join(lines), flush=True)
        return
    if NATIVE_CPU:
        sys.exit("the golden file is PyTorch 1.13's: run this with /usr/bin/python3 (or --print)")
    with open(os.path.join(HERE, "golden", "grad_scaler.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
