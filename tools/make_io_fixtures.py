#!/usr/bin/env python3
"""Small fixtures for deepinfer's io tests, written by the reference libraries themselves.

* tests/data/safetensors/single/model.safetensors and sharded/ (index + 2 shards): written by the
  `safetensors` package from torch tensors of every dtype deepinfer reads; expected.json lists each
  tensor's dtype, shape and bytes (hex), as torch holds them.
* tests/io/data/npy/*.npy: written by numpy.save; expected values in npy_expected.json.
* tests/fuzz/corpus/: seeds for the libFuzzer target, replayed by the unit test. `ok_*` files must parse,
  `bad_*` files must be rejected.

Run: /opt/refenv/bin/python tools/make_io_fixtures.py   (safetensors 0.8.0, torch 2.11, numpy 2.4)
"""
import json
import os
import struct

import numpy as np
import safetensors
import torch
from safetensors.torch import save_file

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
ST = os.path.join(ROOT, "tests", "data", "safetensors")
NPY = os.path.join(ROOT, "tests", "unit", "data", "npy")
CORPUS = os.path.join(ROOT, "tests", "fuzz", "corpus")


def tensors_all_dtypes():
    g = torch.Generator().manual_seed(7)
    return {
        "embed.weight": torch.randn(3, 4, generator=g).to(torch.bfloat16),
        "layers.0.attn.wq_a.weight": torch.randn(4, 4, generator=g).to(torch.float8_e4m3fn),
        "layers.0.attn.wq_a.scale": torch.tensor([[2.0 ** -3]]).to(torch.float8_e8m0fnu),
        # FP4 routed experts are stored as I8 [out, in/2]: two e2m1 codes per byte.
        "layers.0.ffn.experts.0.w1.weight": torch.randint(-128, 128, (2, 3), dtype=torch.int8, generator=g),
        "layers.0.ffn.gate.tid2eid": torch.tensor([[0, 5], [7, 1]], dtype=torch.int32),
        "layers.0.ffn.gate.bias": torch.randn(5, generator=g),
        "layers.0.norm.weight": torch.randn(4, generator=g).to(torch.float16),
        "positions": torch.tensor([0, 1, -(2 ** 40)], dtype=torch.int64),
        "mask": torch.tensor([1, 0, 255], dtype=torch.uint8),
        "empty": torch.zeros(0, 4),
        "scalar": torch.tensor(1.5),
    }


def describe(ts, file_of):
    out = {}
    for name, t in ts.items():
        raw = t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        out[name] = {"dtype": DTYPES[t.dtype], "shape": list(t.shape), "hex": raw.hex(), "file": file_of(name)}
    return out


DTYPES = {torch.bfloat16: "BF16", torch.float8_e4m3fn: "F8_E4M3", torch.float8_e8m0fnu: "F8_E8M0",
          torch.int8: "I8", torch.int32: "I32", torch.float32: "F32", torch.float16: "F16", torch.int64: "I64",
          torch.uint8: "U8"}


def write_safetensors():
    ts = tensors_all_dtypes()
    os.makedirs(os.path.join(ST, "single"), exist_ok=True)
    save_file(ts, os.path.join(ST, "single", "model.safetensors"), metadata={"format": "pt"})

    shard_dir = os.path.join(ST, "sharded")
    os.makedirs(shard_dir, exist_ok=True)
    names = sorted(ts)
    shards = {"model-00001-of-00002.safetensors": names[: len(names) // 2],
              "model-00002-of-00002.safetensors": names[len(names) // 2:]}
    weight_map = {}
    for fname, members in shards.items():
        save_file({n: ts[n] for n in members}, os.path.join(shard_dir, fname), metadata={"format": "pt"})
        weight_map.update({n: fname for n in members})
    with open(os.path.join(shard_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": sum(t.numel() * t.element_size() for t in ts.values())},
                   "weight_map": weight_map}, f, indent=1)
        f.write("\n")
    expected = {"generator": "tools/make_io_fixtures.py", "safetensors": safetensors.__version__,
                "torch": torch.__version__, "single": describe(ts, lambda n: "model.safetensors"),
                "sharded": describe(ts, lambda n: weight_map[n])}
    with open(os.path.join(ST, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1)
        f.write("\n")


def write_npy():
    os.makedirs(NPY, exist_ok=True)
    arrays = {
        "f32_2x3": np.array([[1.5, -2.25, 3.0e-8], [np.inf, -0.0, 65504.0]], dtype="<f4"),
        "f32_scalar": np.array(7.25, dtype="<f4"),
        "f32_empty": np.zeros((0, 3), dtype="<f4"),
        # Long shape text: numpy's spare header room for growing axis 0 pushes the header to 192 bytes.
        "f32_empty_wide": np.zeros((0,) + (1,) * 15, dtype="<f4"),
        "i32_4": np.array([1, -2, 2 ** 31 - 1, -(2 ** 31)], dtype="<i4"),
        "i64_2x2": np.array([[2 ** 40, -1], [0, 123]], dtype="<i8"),
    }
    expected = {}
    for name, a in arrays.items():
        np.save(os.path.join(NPY, name + ".npy"), a)
        vals = [float(v) if a.dtype.kind == "f" else int(v) for v in a.reshape(-1)]
        expected[name] = {"shape": list(a.shape), "descr": a.dtype.str,
                          "values": [v if np.isfinite(v) else str(v) for v in vals]}
    # Files deepinfer must reject: Fortran order, float64.
    np.save(os.path.join(NPY, "bad_fortran.npy"), np.asfortranarray(np.arange(6, dtype="<f4").reshape(2, 3)))
    np.save(os.path.join(NPY, "bad_f64.npy"), np.arange(3, dtype="<f8"))
    with open(os.path.join(NPY, "npy_expected.json"), "w") as f:
        json.dump({"generator": "tools/make_io_fixtures.py", "numpy": np.__version__, "arrays": expected}, f,
                  indent=1)
        f.write("\n")


def raw_st(header_obj, data, header_len=None, pad=True):
    h = json.dumps(header_obj, separators=(",", ":")).encode()
    if pad:
        h += b" " * ((8 - len(h) % 8) % 8)
    n = len(h) if header_len is None else header_len
    return struct.pack("<Q", n) + h + data


def write_corpus():
    os.makedirs(CORPUS, exist_ok=True)
    with open(os.path.join(ST, "single", "model.safetensors"), "rb") as f:
        good = f.read()
    seeds = {
        "ok_single.safetensors": good,
        "ok_empty_header.safetensors": raw_st({}, b""),
        "ok_metadata_only.safetensors": raw_st({"__metadata__": {"a": "b"}}, b""),
        "ok_two.safetensors": raw_st({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                      "b": {"dtype": "I8", "shape": [3], "data_offsets": [8, 11]}}, bytes(11)),
        "bad_truncated.safetensors": good[: len(good) // 2],
        "bad_short.safetensors": b"\x05\x00\x00",
        "bad_header_len.safetensors": raw_st({}, b"", header_len=1 << 40),
        "bad_json.safetensors": struct.pack("<Q", 9) + b'{"a": [1,',
        "bad_not_object.safetensors": raw_st([1, 2], b""),
        "bad_overlap.safetensors": raw_st({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                           "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, bytes(8)),
        "bad_size.safetensors": raw_st({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, bytes(8)),
        "bad_dtype.safetensors": raw_st({"a": {"dtype": "Q4", "shape": [2], "data_offsets": [0, 2]}}, bytes(2)),
        "bad_offsets_past_end.safetensors": raw_st({"a": {"dtype": "U8", "shape": [16],
                                                          "data_offsets": [0, 16]}}, bytes(8)),
        "bad_numel_overflow.safetensors": raw_st({"a": {"dtype": "F32", "shape": [2 ** 62, 8],
                                                        "data_offsets": [0, 0]}}, b""),
        "bad_negative_dim.safetensors": raw_st({"a": {"dtype": "F32", "shape": [-1],
                                                      "data_offsets": [0, 0]}}, b""),
    }
    for name, data in seeds.items():
        with open(os.path.join(CORPUS, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    write_safetensors()
    write_npy()
    write_corpus()
    print("fixtures written")
