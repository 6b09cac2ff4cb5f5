#!/usr/bin/env python3
"""Soak: 12 rounds of mixed traffic against `deepinfer serve` (tiny fixture, reference backend, 32 HTTP threads),
each round 24 clients at once: streaming and whole completions, chat, streams dropped after the first chunk, bad
requests (wrong types, hostile sizes, JSON nested 30,000 deep, schemas that admit nothing or would take all memory
to compile), and a raw connection that sends half a request
and leaves. After every round the server must be back at baseline (nothing running, queued or allocated, no open
stream) and its heap in use (allocated and not freed, from /metrics) and resident memory are recorded: the
curves are printed, and after the warm-up rounds the heap must level off, so no round leaks."""
import asyncio
import json
import os
import socket
import sys
import time
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_fixture as sf  # noqa: E402

sf.require_openai()
import openai  # noqa: E402

ROUNDS, CLIENTS = 12, 24


def post_raw(url, path, body):
    req = urllib.request.Request(url + path, data=body.encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


async def client(c, url, i):
    kind = i % 6
    if kind == 0:  # whole completion
        r = await c.completions.create(model="tiny", prompt=f"soak {i}", max_tokens=6, seed=i)
        return r.choices[0].finish_reason in ("length", "stop")
    if kind == 1:  # streamed completion with usage
        s = await c.completions.create(model="tiny", prompt=f"soak {i}", max_tokens=6, stream=True,
                                       stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
        usage = None
        async for ch in s:
            usage = ch.usage or usage
        return usage is not None and usage.completion_tokens == 6
    if kind == 2:  # chat
        r = await c.chat.completions.create(model="tiny", max_tokens=4, messages=[{"role": "user", "content": "hi"}])
        return r.usage.completion_tokens >= 1
    if kind == 3:  # a stream the client drops after its first chunk
        s = await c.completions.create(model="tiny", prompt="drop me", max_tokens=200, stream=True,
                                       extra_body={"ignore_eos": True})
        async for _ in s:
            break
        await s.close()
        return True
    if kind == 4:  # bad requests: each must be a 400, never a crash
        deep = "[" * 30000 + "]" * 30000
        bodies = ['{"model": "tiny", "prompt": [1, 2, 3], "max_tokens": 9223372036854775807}',
                  '{"model": "tiny", "prompt": ' + deep + '}',
                  '{"model": "tiny", "prompt": "x", "temperature": "hot"}']
        if i == 4:  # schemas that admit nothing or would take all memory to compile (the helper's limit)
            for schema in ({"$ref": "#"}, {"anyOf": [{"type": "string", "maxLength": n} for n in range(1, 2000)]}):
                bodies.append(json.dumps({"model": "tiny", "prompt": "x", "response_format": {
                    "type": "json_schema", "json_schema": {"name": "s", "schema": schema}}}))
        codes = await asyncio.gather(*(asyncio.to_thread(post_raw, url, "/v1/completions", b) for b in bodies))
        return all(code == 400 for code in codes)
    # half a request on a raw connection, then gone
    host, port = url[len("http://"):].split(":")
    with socket.create_connection((host, int(port))) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n{\"mo")
    return True


async def one_round(url):
    c = openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=600)
    try:
        return await asyncio.gather(*(client(c, url, i) for i in range(CLIENTS)))
    finally:
        await c.close()


class SoakTest(unittest.TestCase):
    def test_heap_levels_off(self):
        with sf.Server(["--model", sf.TINY_MODEL, "--tokenizer", sf.TINY_TOKENIZER, "--served-model-name", "tiny",
                        "--max-running", "32", "--read-timeout", "2", "--threads", "32",
                        "--grammar-memory-mib", "256"]) as server:
            rss, heap = [], []
            for rnd in range(1, ROUNDS + 1):
                t0 = time.perf_counter()
                ok = asyncio.run(one_round(server.url))
                self.assertTrue(all(ok), f"round {rnd}: clients {[i for i, v in enumerate(ok) if not v]} failed")
                for _ in range(200):  # back to baseline
                    m = server.metrics()
                    if (m["deepinfer_running_requests"] == 0 and m["deepinfer_waiting_requests"] == 0 and
                            m["deepinfer_open_streams"] == 0 and m['deepinfer_state_memory_bytes{kind="allocated"}'] == 0):
                        break
                    time.sleep(0.05)
                self.assertEqual(m["deepinfer_running_requests"], 0)
                self.assertEqual(m["deepinfer_open_streams"], 0)
                self.assertEqual(m['deepinfer_state_memory_bytes{kind="reserved"}'], 0)
                rss.append(server.rss_kib())
                heap.append(m['deepinfer_process_memory_bytes{kind="heap_in_use"}'] / 1024)
                print(f"round {rnd:2d}: {time.perf_counter() - t0:5.2f} s, server RSS {rss[-1] / 1024:6.1f} MiB, "
                      f"heap in use {heap[-1] / 1024:6.2f} MiB", flush=True)
            print("RSS curve (MiB): " + json.dumps([round(x / 1024, 1) for x in rss]), flush=True)
            print("heap-in-use curve (MiB): " + json.dumps([round(x / 1024, 2) for x in heap]), flush=True)
            # A leak grows with every request. Resident memory is no measure of that: it steps when a thread gets
            # its first malloc arena and dips when the allocator trims (a CI run stepped +5.5 MiB at round 10;
            # here, with 256 threads, RSS stepped 13 MiB while the heap grew 0.25 MiB). Heap in use still warms up: the first request on each HTTP thread sets up its
            # tokenizer scratch, and each thread's word cache fills with the words it has seen (bounded; 32 threads
            # measured +20 KB a round at round 10, +4 KB at round 35). So: the highest heap of rounds 10-12 within
            # 1 MiB of the highest of rounds 7-9 (measured +0.1 to +0.3 MiB; a leak of 15 KB a request fails), and
            # a cap on the resident curve.
            self.assertLess(max(heap[9:]) - max(heap[6:9]), 1024, f"heap in use keeps growing: {heap} KiB")
            self.assertLess(max(rss) - rss[0], 64 * 1024, f"RSS grew by more than 64 MiB: {rss}")
        self.assertEqual(server.rc, 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
