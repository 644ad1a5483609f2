#!/usr/bin/env python3
"""PyTorch's side of pytorch_peer_test.cpp, under every reference PyTorch (Debian's 1.13, PyPI's 2.x):
it checks the files ddp wrote and writes the files ddp checks, all in one run (each start of Python
costs seconds).

    pytorch_peer.py DIR
    pytorch_peer.py --init PATH    (for tests/examples: the twin's initial weights, legacy format)

From C++, DIR holds net.pt and net.safetensors (the example's network, examples/fashion_mnist/
net.h), cpp_state.bin (its state dict's tensors' bytes, in order), inputs.bin (float32 [N, 1, 28,
28]) with cpp_logits.bin (the network's logits on them, in eval mode), and layouts.pt and
layouts.safetensors (state_dict_support.h's layouts()). This script loads both networks into net.py's
twin, whose tensors must equal ddp's bit for bit and whose logits must too where this PyTorch is the
release of ddp's LibTorch (DDP_LIBTORCH_VERSION, from the test; see same_kernels()), checks every
layout's values against the formula, then writes what C++ reads: the twin with other weights in every
way torch.save writes (zip, legacy, pickle protocol 4, a checkpoint dict, DDP's "module." keys,
parameters as nn.Parameter, safetensors from the writer below), its state's bytes (py_state.bin), its
logits, the layouts in both torch.save formats and safetensors, and a whole pickled model. Prints
"PyTorch VERSION" first, then one "ok:" line per check, and exits non-zero on the first failure.

Where the safetensors package is installed (not in Debian 12: PyPI's PyTorch venv has it), the
same files also go through safetensors.torch.load_file, and safetensors.torch.save_file writes
st_net.safetensors and st_layouts.safetensors for C++; else one "skipped: no safetensors" line says so.
"""
import collections
import copy
import json
import os
import struct
import sys

import torch

try:
    import safetensors
    import safetensors.torch
except ImportError:
    safetensors = None

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "examples", "fashion_mnist"))
from net import Net  # noqa: E402  (the example's twin)

DTYPES = {"F32": torch.float32, "F64": torch.float64, "F16": torch.float16, "BF16": torch.bfloat16,
          "I8": torch.int8, "U8": torch.uint8, "I16": torch.int16, "I32": torch.int32, "I64": torch.int64,
          "BOOL": torch.bool}
# c10::toString's names, as state_dict_support.h names the layouts' keys.
CPP_NAMES = {"Float": torch.float32, "Double": torch.float64, "Half": torch.float16, "BFloat16": torch.bfloat16,
             "Char": torch.int8, "Byte": torch.uint8, "Short": torch.int16, "Int": torch.int32, "Long": torch.int64,
             "Bool": torch.bool}


def release(version):
    """"2.15.0+cu132" and "1.13.0a0" -> (2, 15, 0) and (1, 13, 0)."""
    return tuple(int("".join(c for c in part if c.isdigit()) or 0) for part in version.split("+")[0].split(".")[:3])


# Logits computed by another release's kernels (convolution, matmul) may differ in the last bits: measured
# on this network, LibTorch 1.13 against PyTorch 2.15, up to 1.2e-7 (relative to max(1, the largest logit)).
LOGITS_TOLERANCE = 1e-6


def same_kernels():
    """Whether this PyTorch is the release of ddp's LibTorch (then both run the same CPU kernels)."""
    libtorch = os.environ.get("DDP_LIBTORCH_VERSION")
    return libtorch is None or release(libtorch) == release(torch.__version__)


def check_logits(logits, cpp_logits, what):
    if same_kernels():
        check(torch.equal(logits, cpp_logits), f"{what} equal ddp's bit for bit")
        return
    diff = (logits - cpp_logits).abs().max().item()
    scale = max(1.0, cpp_logits.abs().max().item())
    check(diff <= LOGITS_TOLERANCE * scale,
          f"{what} equal ddp's to {diff:.3g} (at most {LOGITS_TOLERANCE:g} x {scale:.3g}: PyTorch "
          f"{torch.__version__}'s kernels, ddp's LibTorch {os.environ['DDP_LIBTORCH_VERSION']})")


def state_bytes(state):
    return b"".join(t.detach().contiguous().numpy().tobytes() for t in state.values())


def check(condition, what):
    if not condition:
        print("FAILED:", what, flush=True)
        sys.exit(1)
    print("ok:", what, flush=True)


def load_safetensors(path):
    """A minimal safetensors reader (the safetensors package is not installed here)."""
    data = open(path, "rb").read()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    metadata = header.pop("__metadata__", None)
    out = collections.OrderedDict()
    for name, info in header.items():
        begin, end = info["data_offsets"]
        raw = bytearray(data[8 + length + begin:8 + length + end])
        dtype = DTYPES[info["dtype"]]
        flat = torch.frombuffer(raw, dtype=dtype) if raw else torch.empty(0, dtype=dtype)
        out[name] = flat.reshape(info["shape"])
    return out, metadata


def save_safetensors(tensors, path, metadata=None):
    """A minimal safetensors writer: header, then each tensor's bytes in order."""
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    names = {v: k for k, v in DTYPES.items()}
    for name, t in tensors.items():
        t = t.detach().contiguous()
        blob = t.flatten().view(torch.uint8).numpy().tobytes()
        header[name] = {"dtype": names[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header).encode()
    text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def values(n, dtype):
    """state_dict_support.h's formula(n, dtype)."""
    i = torch.arange(n, dtype=torch.float64)
    if dtype == torch.bool:
        return i.remainder(3) == 0
    if dtype.is_floating_point:
        return (i * 0.37 - 5.25).to(dtype)
    if dtype == torch.uint8:
        return (i * 7).remainder(256).to(dtype)
    return (i * 7 - 20).to(dtype)


def layouts():
    """state_dict_support.h's layouts()."""
    d = collections.OrderedDict()
    for name, dtype in CPP_NAMES.items():
        d["dtype." + name] = values(12, dtype).view(3, 4)
    base = values(12, torch.float32).view(3, 4)
    d["transposed"] = base.t()
    d["slice"] = values(20, torch.float32).narrow(0, 5, 10)
    d["expanded"] = values(3, torch.float32).view(3, 1).expand(3, 4)
    d["empty"] = torch.empty(0, 3)
    d["scalar"] = torch.tensor(2.5, dtype=torch.float64)
    d["shared.a"] = base
    d["shared.b"] = base
    return d


def storage_ptr(t):
    """The address of a tensor's storage (untyped_storage from 2.0 on; storage() warns there)."""
    return t.untyped_storage().data_ptr() if hasattr(t, "untyped_storage") else t.storage().data_ptr()


def check_with_safetensors(out, inputs, cpp_logits, cpp_state, expected):
    """ddp's safetensors files through the safetensors package itself, where it is installed."""
    if safetensors is None:
        print("skipped: no safetensors package in", sys.executable, flush=True)
        return
    from safetensors.torch import load_file
    model = Net()
    model.load_state_dict(load_file(os.path.join(out, "net.safetensors")))
    check(state_bytes(model.state_dict()) == cpp_state, f"net.safetensors: safetensors {safetensors.__version__}'s "
          "load_file gives the twin ddp's tensors bit for bit")
    model.eval()
    with torch.no_grad():
        logits = model(inputs).flatten()
    check_logits(logits, cpp_logits, "net.safetensors: with load_file, the twin's logits")
    st = load_file(os.path.join(out, "layouts.safetensors"))
    with safetensors.safe_open(os.path.join(out, "layouts.safetensors"), framework="pt") as f:
        check(f.metadata() == {"format": "pt", "writer": "ddp"}, "layouts.safetensors: safe_open's metadata")
    check(sorted(st.keys()) == sorted(expected.keys()), "layouts.safetensors: load_file's keys")
    for key, t in expected.items():
        check(same(st[key], t), f"layouts.safetensors: load_file's {key}")


def same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)


def main():
    out = sys.argv[1]
    print("PyTorch", torch.__version__, flush=True)
    torch.set_num_threads(1)
    inputs = torch.frombuffer(bytearray(open(os.path.join(out, "inputs.bin"), "rb").read()), dtype=torch.float32)
    inputs = inputs.view(-1, 1, 28, 28)
    cpp_logits = torch.frombuffer(bytearray(open(os.path.join(out, "cpp_logits.bin"), "rb").read()), dtype=torch.float32)
    cpp_state = open(os.path.join(out, "cpp_state.bin"), "rb").read()

    # C++ -> Python: the example's network, in both formats, into the Python twin.
    for name in ("net.pt", "net.safetensors"):
        path = os.path.join(out, name)
        if name.endswith(".pt"):
            state = torch.load(path, weights_only=True)
            check(isinstance(state, collections.OrderedDict), f"{name}: torch.load(weights_only=True) gives an OrderedDict")
            full = torch.load(path, weights_only=False)  # 2.6 made weights_only=True the default
            check(list(full.keys()) == list(state.keys()), f"{name}: the full unpickler reads it as well")
        else:
            state, _ = load_safetensors(path)
        model = Net()
        model.load_state_dict(state)  # strict: the names and shapes are the twin's
        check(state_bytes(model.state_dict()) == cpp_state, f"{name}: the twin's tensors equal ddp's bit for bit")
        model.eval()
        with torch.no_grad():
            logits = model(inputs).flatten()
        check_logits(logits, cpp_logits, f"{name}: the twin's logits")

    # Every dtype and layout, C++ -> Python.
    expected = layouts()
    pt = torch.load(os.path.join(out, "layouts.pt"), weights_only=True)
    check(list(pt.keys()) == list(expected.keys()), "layouts.pt: the keys, in order")
    for key, t in expected.items():
        check(same(pt[key], t), f"layouts.pt: {key} ({t.dtype}, {list(t.shape)})")
    check(pt["transposed"].stride() == (1, 4), "layouts.pt: the transposed view keeps its strides")
    check(pt["shared.a"].data_ptr() == pt["shared.b"].data_ptr()
          and storage_ptr(pt["transposed"]) == storage_ptr(pt["shared.a"]),
          "layouts.pt: tensors that shared storage in C++ share it in Python")
    st, metadata = load_safetensors(os.path.join(out, "layouts.safetensors"))
    check(metadata == {"format": "pt", "writer": "ddp"}, "layouts.safetensors: __metadata__")
    for key, t in expected.items():
        check(same(st[key], t), f"layouts.safetensors: {key}")
    check_with_safetensors(out, inputs, cpp_logits, cpp_state, expected)

    # Python -> C++: the twin with weights of its own (and BatchNorm statistics that are not the
    # defaults), saved every way torch.save does.
    torch.manual_seed(7)
    model = Net()
    with torch.no_grad():
        for bn in (model.bn1, model.bn2):
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)
            bn.num_batches_tracked.fill_(5)
    model.eval()
    with torch.no_grad():
        model(inputs).flatten().numpy().tofile(os.path.join(out, "py_logits.bin"))
    sd = model.state_dict()
    with open(os.path.join(out, "py_state.bin"), "wb") as f:
        f.write(state_bytes(sd))
    torch.save(sd, os.path.join(out, "py_zip.pt"))
    torch.save(sd, os.path.join(out, "py_legacy.pt"), _use_new_zipfile_serialization=False)
    torch.save(sd, os.path.join(out, "py_protocol4.pt"), pickle_protocol=4)
    torch.save(collections.OrderedDict(("module." + k, v) for k, v in sd.items()), os.path.join(out, "py_ddp.pt"))
    torch.save(dict(model.named_parameters()), os.path.join(out, "py_parameters.pt"))
    save_safetensors(sd, os.path.join(out, "py_net.safetensors"), {"framework": "pytorch"})
    torch.save(model, os.path.join(out, "py_whole_model.pt"))
    # A checkpoint dict, with an optimizer whose state holds int keys and momentum tensors (a
    # step of a copy, so that the model's weights stay those of the logits).
    trainee = copy.deepcopy(model).train()
    optimizer = torch.optim.SGD(trainee.parameters(), lr=0.1, momentum=0.9)
    trainee(inputs).sum().backward()
    optimizer.step()
    torch.save({"model": sd, "epoch": 3, "optimizer": optimizer.state_dict(), "note": "best"},
               os.path.join(out, "py_checkpoint.pt"))
    torch.save(layouts(), os.path.join(out, "py_layouts.pt"))
    torch.save(layouts(), os.path.join(out, "py_layouts_legacy.pt"), _use_new_zipfile_serialization=False)
    save_safetensors(layouts(), os.path.join(out, "py_layouts.safetensors"))
    if safetensors is not None:
        # save_file refuses views that share memory and non-contiguous tensors: each gets its own copy.
        safetensors.torch.save_file(sd, os.path.join(out, "st_net.safetensors"), {"writer": "safetensors"})
        safetensors.torch.save_file({k: v.contiguous().clone() for k, v in layouts().items()},
                                    os.path.join(out, "st_layouts.safetensors"))
    print("ok: wrote the files for C++", flush=True)


def write_initial_weights(path):
    """Weights of net.py's twin, as a colleague's script would save them before training."""
    torch.manual_seed(11)
    torch.save(Net().state_dict(), path, _use_new_zipfile_serialization=False)
    print("ok: wrote", path, flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "--init":
        write_initial_weights(sys.argv[2])
    else:
        main()
