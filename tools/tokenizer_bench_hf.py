#!/usr/bin/env python3
"""Encode throughput of Hugging Face `tokenizers` (one thread) on a text file, for comparison with
bench/tokenizer_bench. Usage: tokenizer_bench_hf.py TOKENIZER_JSON TEXT_FILE [REPEATS]"""
import os
import sys
import time

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"
import tokenizers  # noqa: E402


def main():
    tok = tokenizers.Tokenizer.from_file(sys.argv[1])
    data = open(sys.argv[2], "rb").read()
    text = data.decode("utf-8", errors="replace")
    repeats = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    best, n = 1e30, 0
    for _ in range(repeats):
        t0 = time.perf_counter()
        n = len(tok.encode(text).ids)
        best = min(best, time.perf_counter() - t0)
    print(f"hf tokenizers {tokenizers.__version__} encode: {sys.argv[2]} {len(data)} bytes -> {n} ids, "
          f"best of {repeats}: {best:.3f} s = {len(data) / best / 1e6:.2f} MB/s")


if __name__ == "__main__":
    main()
