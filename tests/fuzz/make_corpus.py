#!/usr/bin/env python3
"""Writes the seed corpus of store_wire_fuzzer (tests/fuzz/corpus/store_wire): a few valid
streams of each protocol, so that the fuzzer starts from the shapes real clients send. The first
byte of each file picks the parser (see store_wire_fuzzer.cpp)."""
import os
import struct

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "store_wire")


def b32(s):  # ddp: u32 length + bytes
    return struct.pack("<I", len(s)) + s


def frame(body):
    return struct.pack("<I", len(body)) + body


def ddp_hello():
    return frame(bytes([1]) + struct.pack("<H", 1) + b32(b"job") + struct.pack("<qqq", 1, 0, 4242) + b32(b"host"))


def b64(s):  # PyTorch: u64 length + bytes
    return struct.pack("<Q", len(s)) + s


seeds = {
    "ddp_hello_set_get": bytes([0]) + ddp_hello() + frame(bytes([2]) + b32(b"key") + b32(b"value"))
    + frame(bytes([3]) + b32(b"key") + struct.pack("<q", 1000)),
    "ddp_add_cas_wait": bytes([0]) + frame(bytes([4]) + b32(b"counter") + struct.pack("<q", 5))
    + frame(bytes([5]) + b32(b"k") + b32(b"") + b32(b"v"))
    + frame(bytes([7]) + struct.pack("<I", 2) + b32(b"a") + b32(b"b") + struct.pack("<q", 500))
    + frame(bytes([6]) + struct.pack("<I", 1) + b32(b"a")) + frame(bytes([8]) + b32(b"a")) + frame(bytes([9]))
    + frame(bytes([10])) + frame(bytes([11])),
    "ddp_multi_get_and_unknown": bytes([0]) + frame(bytes([12]) + struct.pack("<I", 2) + b32(b"a") + b32(b"b")
    + struct.pack("<q", 500)) + frame(bytes([99]) + b32(b"from a newer client")),
    "ddp_responses": bytes([1]) + frame(bytes([0])) + frame(bytes([1]) + b32(b"value")) + frame(bytes([2]) + struct.pack("<q", 7))
    + frame(bytes([3]) + struct.pack("<I", 1) + b32(b"missing")) + frame(bytes([4]) + b32(b"error"))
    + frame(bytes([5]) + b32(b"job")) + frame(bytes([6]) + b32(b"2"))
    + frame(bytes([7]) + struct.pack("<I", 2) + b32(b"value a") + b32(b"")),
    "torch_113_set_get_add": bytes([2]) + bytes([0]) + b64(b"/key") + b64(b"value") + bytes([2]) + b64(b"/key")
    + bytes([3]) + b64(b"init/") + struct.pack("<q", 1) + bytes([4]) + struct.pack("<Q", 1) + b64(b"/key")
    + bytes([5]) + struct.pack("<Q", 1) + b64(b"/key") + bytes([6]) + bytes([8]) + b64(b"/key")
    + bytes([1]) + b64(b"/k") + b64(b"") + b64(b"v") + bytes([7]) + b64(b"/k"),
    "torch_validated": bytes([3]) + bytes([0]) + struct.pack("<I", 0x3C85F7CE) + bytes([1]) + b64(b"/key") + b64(b"value")
    + bytes([13]) + struct.pack("<I", 99) + bytes([10]) + struct.pack("<Q", 2) + b64(b"/a") + b64(b"/b"),
    "torch_bytes": bytes([4]) + b64(b"some value"),
    # Key-space steps: a client byte before each ddp request (hello advances the clock by its rank field).
    "key_space_steps": bytes([5]) + bytes([1]) + frame(bytes([3]) + b32(b"k") + struct.pack("<q", 100))
    + bytes([2]) + frame(bytes([6]) + struct.pack("<I", 1) + b32(b"k"))
    + bytes([3]) + frame(bytes([2]) + b32(b"k") + b32(b"v"))
    + bytes([1]) + frame(bytes([7]) + struct.pack("<I", 2) + b32(b"a") + b32(b"k") + struct.pack("<q", 50))
    + bytes([0]) + frame(bytes([1]) + struct.pack("<H", 1) + b32(b"") + struct.pack("<qqq", 0, 60, 0) + b32(b""))
    + bytes([3]) + frame(bytes([4]) + b32(b"k") + struct.pack("<q", 1))
    + bytes([3]) + frame(bytes([5]) + b32(b"k") + b32(b"v") + b32(b"w"))
    + bytes([4]) + frame(bytes([7]) + struct.pack("<I", 1) + b32(b"gone") + struct.pack("<q", -1))
    + bytes([5]) + frame(bytes([12]) + struct.pack("<I", 2) + b32(b"k") + b32(b"a") + struct.pack("<q", 70))
    + bytes([3]) + frame(bytes([2]) + b32(b"a") + b32(b"1"))
    + bytes([3]) + frame(bytes([8]) + b32(b"k")) + bytes([2]) + frame(bytes([10])) + bytes([4]) + frame(bytes([11])),
}

os.makedirs(HERE, exist_ok=True)
for name, data in seeds.items():
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(data)
print("wrote %d seeds to %s" % (len(seeds), HERE))
