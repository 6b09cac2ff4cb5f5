#!/usr/bin/env python3
"""Re-check committed V4 fixtures against transformers: load each directory as it is on disk, run one
full forward over prompt.txt and compare with logits.npy (and greedy.json's first steps).

    PYTHONPATH=<dir with accelerate> /opt/refenv/bin/python tools/fixtures_verify.py [names...]
"""
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fixtures_bf16  # noqa: E402
import fixtures_common as fc  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data")
torch.set_num_threads(2)


def check(name):
    d = os.path.join(ROOT, name)
    prompt = [int(x) for x in open(os.path.join(d, "prompt.txt")).read().split()]
    model = fc.load(d, dtype=torch.float32).float()
    logits32 = fc.full_forward(model, prompt).numpy()
    report = {}
    if name == "v4_tiny_bf16":
        want32 = np.load(os.path.join(d, "logits_fp32.npy"))
        report["fp32_bitwise"] = bool(np.array_equal(logits32, want32))
        l16 = fc.full_forward(fixtures_bf16.bf16_model(model), prompt).float().numpy()
        report["bf16_bitwise"] = bool(np.array_equal(l16, np.load(os.path.join(d, "logits.npy"))))
        greedy = json.load(open(os.path.join(d, "greedy_fp32.json")))
    else:
        want = np.load(os.path.join(d, "logits.npy"))
        report["max_rel_dev"] = float(np.abs(logits32 - want).max() / np.abs(want).max())
        report["bitwise"] = bool(np.array_equal(logits32, want))
        greedy = json.load(open(os.path.join(d, "greedy.json")))
    seq = greedy["prompt"] + greedy["continuation"]
    full = fc.full_forward(model, seq)
    argmax = full[len(greedy["prompt"]) - 1:-1].argmax(-1).tolist()
    report["greedy_equals_full_forward_argmax"] = argmax == greedy["continuation"]
    return report


def main():
    names = sys.argv[1:] or ["v4_tiny_fp32", "v4_tiny_fp32_nested", "v4_tiny_bf16", "v4_tiny_fp8"]
    ok = True
    for n in names:
        r = check(n)
        print(n, r, flush=True)
        ok &= all(v for k, v in r.items() if isinstance(v, bool))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
