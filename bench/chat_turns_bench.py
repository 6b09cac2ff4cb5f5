#!/usr/bin/env python3
"""Multi-turn chat benchmark: what the prefix cache saves when every turn resends the whole conversation.

Starts `deepinfer serve` twice on the same model (the demo model unless --model is given): with its defaults
(prefix cache on) and with --no-prefix-cache. Each run holds one conversation of --turns turns through
/v1/chat/completions (streaming, greedy): a user message of --words words, the assistant's answer of
--max-tokens tokens appended to the history, and so on. Per turn: prompt tokens, the prompt tokens the server
restored from its cache (usage.prompt_tokens_details.cached_tokens) and the time to the first token. The two
runs must answer every turn with the same text (the cache's outputs are bit-identical); the script fails
otherwise. Prints a markdown table with the machine, commit and settings.

  bench/chat_turns_bench.py --binary build-cpu/deepinfer --turns 8 --words 120 --max-tokens 16
"""
import argparse
import http.client
import json
import os
import random
import time

from serve_bench import ROOT, machine_and_commit, served_model, start_server, stop_server


def chat_turn(host, port, model, messages, max_tokens):
    conn = http.client.HTTPConnection(host, port, timeout=3600)
    body = json.dumps({"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0,
                       "stream": True, "stream_options": {"include_usage": True}})
    t0 = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:300]}")
    ttft, text, usage = None, "", {}
    for raw in resp:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        j = json.loads(line[6:])
        if j.get("usage"):
            usage = j["usage"]
        for c in j.get("choices", []):
            piece = c.get("delta", {}).get("content") or ""
            if ttft is None and (piece or c.get("delta", {}).get("reasoning_content")):
                ttft = time.perf_counter() - t0
            text += piece
    conn.close()
    return dict(ttft=ttft if ttft is not None else time.perf_counter() - t0, text=text,
                prompt=usage.get("prompt_tokens", 0),
                cached=usage.get("prompt_tokens_details", {}).get("cached_tokens", 0))


def conversation(binary, model_dir, args, turns, words, max_tokens, seed):
    proc, host, port = start_server(binary, model_dir, args)
    try:
        model = served_model(host, port)
        rng = random.Random(seed)
        vocab = "state cache model token prefix chunk expert window layer decode prefill memory".split()
        chat_turn(host, port, model, [{"role": "user", "content": "warm up"}], 2)  # first-request costs
        messages, out = [], []
        for _ in range(turns):
            messages.append({"role": "user", "content": " ".join(rng.choice(vocab) for _ in range(words))})
            r = chat_turn(host, port, model, messages, max_tokens)
            messages.append({"role": "assistant", "content": r["text"]})
            out.append(r)
        return model, out
    finally:
        stop_server(proc)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=os.path.join(ROOT, "build-cpu/deepinfer"))
    ap.add_argument("--model", help="model directory (default: the demo model)")
    ap.add_argument("--serve-args", default="", help="extra arguments for both servers")
    ap.add_argument("--turns", type=int, default=8)
    ap.add_argument("--words", type=int, default=120, help="words of each user message")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()

    extra = a.serve_args.split()
    model, cached = conversation(a.binary, a.model, extra, a.turns, a.words, a.max_tokens, a.seed)
    _, plain = conversation(a.binary, a.model, extra + ["--no-prefix-cache"], a.turns, a.words, a.max_tokens,
                            a.seed)
    print(f"{machine_and_commit()}; model {model}; {a.turns} turns of {a.words} words, max_tokens {a.max_tokens}; "
          f"serve args: {a.serve_args or '(defaults)'}")
    print()
    print("| turn | prompt tokens | cached | TTFT cache s | TTFT no cache s | speed-up | same answer |")
    print("|---:|---:|---:|---:|---:|---:|:---:|")
    same_all = True
    for i, (c, p) in enumerate(zip(cached, plain)):
        same = c["text"] == p["text"]
        same_all = same_all and same
        print(f"| {i + 1} | {c['prompt']} | {c['cached']} | {c['ttft']:.3f} | {p['ttft']:.3f} | "
              f"{p['ttft'] / c['ttft']:.2f}x | {'yes' if same else 'NO'} |")
    tc, tp = sum(r["ttft"] for r in cached), sum(r["ttft"] for r in plain)
    print(f"\nall turns: TTFT {tc:.3f} s with the cache, {tp:.3f} s without ({tp / tc:.2f}x)")
    if not same_all:
        raise SystemExit("the answers differ between the cached and uncached runs")


if __name__ == "__main__":
    main()
