#!/usr/bin/env python3
"""Writes the seed corpora of the weight-file fuzzers with PyTorch (/usr/bin/python3):
corpus/pytorch_weights (the first byte picks the reader, see pytorch_weights_fuzzer.cpp) and
corpus/safetensors: small files in the shapes real ones have, so that fuzzing starts from them."""
import collections
import io
import json
import os
import pickle
import struct
import zipfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ZIP_PICKLE, LEGACY_PICKLE, WHOLE_FILE = b"\x00", b"\x01", b"\x02"


def small_state_dict():
    base = torch.arange(6, dtype=torch.float32).view(2, 3)
    return collections.OrderedDict([
        ("w", base), ("w_t", base.t()), ("b", torch.tensor([1, 2], dtype=torch.int64)),
        ("h", torch.ones(2, dtype=torch.float16)), ("m", torch.tensor([True, False])),
        ("n", torch.tensor(3)), ("e", torch.empty(0, 2, dtype=torch.bfloat16)),
    ])


def saved(obj, **kwargs):
    f = io.BytesIO()
    torch.save(obj, f, **kwargs)
    return f.getvalue()


def legacy_pickles(data):
    """The five pickles of a legacy torch.save file, as byte strings."""
    f, out = io.BytesIO(data), []
    for _ in range(3):
        start = f.tell()
        pickle.load(f)
        out.append(data[start:f.tell()])

    class Skip(pickle.Unpickler):
        def persistent_load(self, pid):
            return None

        def find_class(self, module, name):
            return lambda *args, **kwargs: collections.OrderedDict()

    start = f.tell()
    Skip(f).load()
    out.append(data[start:f.tell()])
    return out


def safetensors(tensors, metadata=None):
    names = {torch.float32: "F32", torch.float64: "F64", torch.float16: "F16", torch.bfloat16: "BF16",
             torch.int8: "I8", torch.uint8: "U8", torch.int16: "I16", torch.int32: "I32", torch.int64: "I64",
             torch.bool: "BOOL"}
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for name, t in tensors.items():
        blob = t.contiguous().flatten().view(torch.uint8).numpy().tobytes()
        header[name] = {"dtype": names[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def main():
    sd = small_state_dict()
    zipped = saved(sd)
    legacy = saved(sd, _use_new_zipfile_serialization=False)
    data_pkl = next(zipfile.ZipFile(io.BytesIO(zipped)).read(n) for n in zipfile.ZipFile(io.BytesIO(zipped)).namelist()
                    if n.endswith("/data.pkl"))
    seeds = {
        "pytorch_weights": {
            "zip_data_pkl": ZIP_PICKLE + data_pkl,
            "zip_data_pkl_protocol4": ZIP_PICKLE + zipfile.ZipFile(io.BytesIO(saved(sd, pickle_protocol=4))).read(
                "archive/data.pkl"),
            "legacy_object_pickle": LEGACY_PICKLE + legacy_pickles(legacy)[3],
            "zip_file": WHOLE_FILE + zipped,
            "legacy_file": WHOLE_FILE + legacy,
            "checkpoint_dict": WHOLE_FILE + saved({"model": collections.OrderedDict(w=sd["w"]), "epoch": 3}),
            "parameters": WHOLE_FILE + saved({"p": torch.nn.Parameter(torch.ones(2))}),
        },
        "safetensors": {
            "every_dtype": safetensors(collections.OrderedDict((f"t{i}", torch.ones(2, 2, dtype=d)) for i, d in enumerate(
                [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int16,
                 torch.int32, torch.int64, torch.bool]))),
            "metadata_and_shapes": safetensors(collections.OrderedDict(
                [("scalar", torch.tensor(1.5)), ("empty", torch.empty(0, 3)), ("w\u00e9", torch.arange(4.0))]),
                {"format": "pt", "note": "a \"quoted\" \\ value"}),
            "empty": safetensors({}),
        },
    }
    for corpus, files in seeds.items():
        folder = os.path.join(HERE, "corpus", corpus)
        os.makedirs(folder, exist_ok=True)
        for name, data in files.items():
            with open(os.path.join(folder, name), "wb") as f:
                f.write(data)
        print(f"{folder}: {len(files)} seeds, {max(len(d) for d in files.values())} bytes at most")


if __name__ == "__main__":
    main()
