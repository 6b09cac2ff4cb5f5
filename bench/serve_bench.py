#!/usr/bin/env python3
"""Serving benchmark: throughput and time-to-first-token / inter-token latency (p50, p99) against concurrency.

Starts `deepinfer serve` (the demo model unless --model is given) on a free loopback port, or uses --url, then
for each concurrency C runs C closed-loop streaming clients (standard library HTTP, no openai dependency) that
each send --requests-per-client completion requests with a fixed prompt and max_tokens (ignore_eos, so every
request generates exactly max_tokens). TTFT = request start to first SSE token chunk; ITL = gaps between
token chunks of one stream. Prints a markdown table with the machine, commit and settings.

  bench/serve_bench.py --binary build-cpu/deepinfer --concurrency 1,2,4,8,16 --max-tokens 16
"""
import argparse
import http.client
import json
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def stream_once(host, port, model, prompt, max_tokens, out):
    conn = http.client.HTTPConnection(host, port, timeout=3600)
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                       "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}})
    t0 = time.perf_counter()
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:300]}")
    times, n_tokens = [], 0
    for raw in resp:
        line = raw.decode().strip()
        if not line.startswith("data: "):
            continue
        data = line[6:]
        if data == "[DONE]":
            break
        j = json.loads(data)
        if j.get("usage"):
            n_tokens = j["usage"]["completion_tokens"]
        if j.get("choices"):
            times.append(time.perf_counter())
    conn.close()
    out.append(dict(ttft=times[0] - t0, itl=[b - a for a, b in zip(times, times[1:])], tokens=n_tokens,
                    end=time.perf_counter()))


def start_server(binary, model, args):
    """Starts `deepinfer serve` on a free loopback port; returns (process, host, port)."""
    cmd = [binary, "serve", "--port", "0", "--max-running", "64"] + (["--model", model] if model else []) + args
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in proc.stdout:
        sys.stderr.write(line)
        m = re.search(r"on http://([\d.]+):(\d+)", line)
        if m:
            threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
            return proc, m.group(1), int(m.group(2))
    raise SystemExit("server did not start")


def served_model(host, port):
    c = http.client.HTTPConnection(host, port)
    c.request("GET", "/v1/models")
    return json.loads(c.getresponse().read())["data"][0]["id"]


def machine_and_commit():
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    return f"machine: {platform.node()} {platform.processor() or platform.machine()}, {os.cpu_count()} cores; " \
           f"commit {commit}"


def stop_server(proc):
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)


def run_level(host, port, model, prompt, max_tokens, conc, per_client):
    results, errors = [], []

    def client():
        try:
            for _ in range(per_client):
                stream_once(host, port, model, prompt, max_tokens, results)
        except Exception as e:  # reported, the level is marked failed
            errors.append(str(e))

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(conc)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        raise RuntimeError(f"concurrency {conc}: {errors[0]}")
    tokens = sum(r["tokens"] for r in results)
    ttft = [r["ttft"] for r in results]
    itl = [x for r in results for x in r["itl"]]
    return dict(conc=conc, requests=len(results), tokens=tokens, wall=wall, tps=tokens / wall,
                rps=len(results) / wall, ttft50=pct(ttft, 50), ttft99=pct(ttft, 99), itl50=pct(itl, 50),
                itl99=pct(itl, 99))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=os.path.join(ROOT, "build-cpu/deepinfer"))
    ap.add_argument("--url", help="benchmark a running server (http://host:port) instead of starting one")
    ap.add_argument("--model", help="model directory (default: the demo model)")
    ap.add_argument("--serve-args", default="", help="extra arguments for deepinfer serve")
    ap.add_argument("--concurrency", default="1,2,4,8,16")
    ap.add_argument("--requests-per-client", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--prompt", default="The quick brown fox jumps over the lazy dog. " * 2)
    a = ap.parse_args()

    proc = None
    if a.url:
        m = re.match(r"http://([^:/]+):(\d+)", a.url)
        host, port = m.group(1), int(m.group(2))
    else:
        proc, host, port = start_server(a.binary, a.model, a.serve_args.split())
    try:
        model = served_model(host, port)
        print(f"{machine_and_commit()}; model {model}; prompt {len(a.prompt)} chars; max_tokens {a.max_tokens}; "
              f"{a.requests_per_client} requests per client; serve args: {a.serve_args or '(defaults)'}")
        print()
        print("| concurrency | requests | gen tokens | wall s | tok/s | req/s | TTFT p50 s | TTFT p99 s | ITL p50 ms | ITL p99 ms |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for conc in [int(x) for x in a.concurrency.split(",")]:
            r = run_level(host, port, model, a.prompt, a.max_tokens, conc, a.requests_per_client)
            print(f"| {r['conc']} | {r['requests']} | {r['tokens']} | {r['wall']:.1f} | {r['tps']:.2f} | "
                  f"{r['rps']:.3f} | {r['ttft50']:.2f} | {r['ttft99']:.2f} | {r['itl50'] * 1000:.0f} | "
                  f"{r['itl99'] * 1000:.0f} |", flush=True)
    finally:
        if proc:
            stop_server(proc)


if __name__ == "__main__":
    main()
