#!/usr/bin/env python3
"""Greedy continuations of v4_tiny_fp8's greedy.json prompt (130 tokens, EOS suppressed) and where each first
leaves transformers' fp32 one: transformers bf16 and transformers with DeepSeek's fp8 activation quantisation
(the references' own divergence, tools/fixtures_native.py's hooks), then deepinfer in both precisions on the
backends given. Prints one line per run: the step of the first different token (none: all 130 agree).

    python3 tools/greedy_divergence.py DEEPINFER_BINARY [backend ...]   (backends: cpu by default)
"""
import json
import os
import subprocess
import sys
import types

CALLER_ENV = dict(os.environ)  # deepinfer runs with the caller's GPUs; transformers here on the CPU
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fixtures_common as fc  # noqa: E402
import fixtures_native as fn  # noqa: E402
import torch  # noqa: E402

FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "v4_tiny_fp8")


def first_divergence(got, want):
    return next((i for i, (a, b) in enumerate(zip(got, want)) if a != b),
                None if len(got) == len(want) else min(len(got), len(want)))


def deepinfer(binary, backend, precision, prompt):
    out = subprocess.run([binary, "generate", "--backend", backend, "--model", FIXTURE, "--tokens",
                          ",".join(map(str, prompt)), "--temperature", "0", "--max-new-tokens", str(fc.GREEDY_NEW),
                          "--min-new-tokens", str(fc.GREEDY_NEW), "--output", "ids", "--precision", precision],
                         check=True, capture_output=True, text=True, env=CALLER_ENV)
    return json.loads(out.stdout)


def main():
    binary, backends = sys.argv[1], sys.argv[2:] or ["cpu"]
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    g = json.load(open(os.path.join(FIXTURE, "greedy.json")))
    prompt, want = g["prompt"], g["continuation"]
    model = fc.load(FIXTURE).float()
    runs = {"transformers fp32 (greedy.json)": fc.greedy(model, prompt)[0]}
    runs["transformers bf16"] = fc.greedy(fn.bf16_same_weights(model), prompt)[0]
    for name, mod in model.named_modules():
        if name.endswith(fn.FP8_LINEARS):
            mod.register_forward_pre_hook(lambda m, args: (fn.act_quant_dequant(args[0]),) + tuple(args[1:]))
        if type(mod).__name__ == "DeepseekV4Experts":
            mod.forward = types.MethodType(fn.quantised_experts_forward, mod)
    runs["transformers fp8 activations"] = fc.greedy(model, prompt)[0]
    for be in backends:
        for precision in ("exact", "native"):
            runs[f"deepinfer {precision} ({be})"] = deepinfer(binary, be, precision, prompt)
    for name, ids in runs.items():
        d = first_divergence(ids, want)
        print(f"{name:34s} {len(ids)} tokens, first divergence from transformers fp32: "
              f"{'none' if d is None else 'step %d' % d}")
    native_hf = runs["transformers fp8 activations"]
    for be in backends:
        d = first_divergence(runs[f"deepinfer native ({be})"], native_hf)
        print(f"deepinfer native ({be}) against transformers fp8 activations: "
              f"{'none' if d is None else 'step %d' % d}")


if __name__ == "__main__":
    main()
