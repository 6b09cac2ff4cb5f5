#!/usr/bin/env python3
"""Long-prompt goldens for v4_tiny_fp8 (transformers 5.17, CPU, dequantize mode), so a prefill of one step
runs the routed experts at a prefill's size (the CUDA backend's W4A8 MoE takes a chunk from 2,048 (token,
slot) pairs: 1,100 tokens x 2 slots) and attention and the compressors see a context of 1,100 tokens:

  prompt_long.txt            1,100 token ids (fixtures_common.make_prompt with its own seed)
  long_rows.txt              the positions whose logits are kept: every 8th (7, 15, ...) and the last 32
  logits_long.npy            transformers fp32 at those positions
  logits_long_native.npy     the fp32 model as `--precision native` computes it (fixtures_native.make_native)
  logits_long_bf16.npy       the bf16 model of the same weights: the noise floor

Only those rows are stored (170 KB a file instead of 1.1 MB): the test tree travels with every GPU call.

    python3 tools/fixtures_native_long.py [fixture dir]
"""
import os
import sys

os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fixtures_common as fc  # noqa: E402
import fixtures_native as fn  # noqa: E402

N_LONG = 1100
SEED = 4242


def kept_rows(n):
    return sorted(set(range(7, n, 8)) | set(range(n - 32, n)))


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "tests", "data",
                                                           "v4_tiny_fp8")
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    prompt = fc.make_prompt(SEED, n=N_LONG)
    rows = kept_rows(N_LONG)
    model = fc.load(d).float()
    plain = fc.full_forward(model, prompt).numpy()[rows]
    bf16 = fc.full_forward(fn.bf16_same_weights(model), prompt).float().numpy()[rows]
    fn.make_native(model)
    native = fc.full_forward(model, prompt).numpy()[rows]
    scale = np.abs(plain).max()
    print("%d rows of %d; bf16 vs fp32 %.3g, native vs fp32 %.3g of max |logit|; torch %s" %
          (len(rows), N_LONG, np.abs(bf16 - plain).max() / scale, np.abs(native - plain).max() / scale,
           torch.__version__), flush=True)
    fc.write_prompt(os.path.join(d, "prompt_long.txt"), prompt)
    with open(os.path.join(d, "long_rows.txt"), "w") as f:
        f.write(" ".join(str(r) for r in rows) + "\n")
    np.save(os.path.join(d, "logits_long.npy"), plain.astype(np.float32))
    np.save(os.path.join(d, "logits_long_native.npy"), native.astype(np.float32))
    np.save(os.path.join(d, "logits_long_bf16.npy"), bf16.astype(np.float32))


if __name__ == "__main__":
    main()
