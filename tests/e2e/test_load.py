#!/usr/bin/env python3
"""Load test on loopback: 64 concurrent streaming clients (official openai AsyncOpenAI), two rounds; streaming
completions with short prompts (the chat template would add ~60 byte tokens of prefill per request, which the
reference backend on 2 cores turns into a minute per round; chat streaming is covered by test_openai_client).
Checks that every stream completes with a finish reason and a usage chunk, that token counts add up (each
stream's usage, the sum over streams, and the server's own counters), and that the server returns to its
baseline: no request running or queued, zero sequence-state bytes allocated or reserved, no open stream, and
resident memory after round 2 within 32 MiB of that after round 1 (round 1 warms allocator caches)."""
import asyncio
import os
import statistics
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_fixture as sf  # noqa: E402

sf.require_openai()
import openai  # noqa: E402

N_CLIENTS = 64
MAX_TOKENS = 8


async def one_client(client, i):
    t0 = time.perf_counter()
    ttft, text, finish, usage, n_chunks = None, "", None, None, 0
    stream = await client.completions.create(
        model="tiny", prompt=f"client {i} says hi", max_tokens=MAX_TOKENS,
        temperature=0.7, seed=i, stream=True, stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
    async for chunk in stream:
        n_chunks += 1
        if chunk.usage is not None:
            usage = chunk.usage
            continue
        c = chunk.choices[0]
        if ttft is None:
            ttft = time.perf_counter() - t0
        text += c.text
        finish = c.finish_reason or finish
    return dict(ttft=ttft, total=time.perf_counter() - t0, text=text, finish=finish, usage=usage, chunks=n_chunks)


async def round_of(url):
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=600)
    try:
        return await asyncio.gather(*(one_client(client, i) for i in range(N_CLIENTS)))
    finally:
        await client.close()


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


class LoadTest(unittest.TestCase):
    def test_64_concurrent_streams(self):
        with sf.Server(["--model", sf.TINY_MODEL, "--tokenizer", sf.TINY_TOKENIZER, "--served-model-name", "tiny",
                        "--max-running", "64", "--threads", "128"]) as server:
            rss = []
            for rnd in (1, 2):
                before = server.metrics()
                t0 = time.perf_counter()
                results = asyncio.run(round_of(server.url))
                wall = time.perf_counter() - t0
                after = server.metrics()
                self.assertEqual(len(results), N_CLIENTS)
                for r in results:
                    self.assertEqual(r["finish"], "length")
                    self.assertIsNotNone(r["usage"], "stream ended without its usage chunk")
                    self.assertEqual(r["usage"].completion_tokens, MAX_TOKENS)
                    self.assertEqual(r["usage"].total_tokens, r["usage"].prompt_tokens + MAX_TOKENS)
                prompt_sum = sum(r["usage"].prompt_tokens for r in results)
                gen = after["deepinfer_generation_tokens_total"] - before["deepinfer_generation_tokens_total"]
                prm = after["deepinfer_prompt_tokens_total"] - before["deepinfer_prompt_tokens_total"]
                self.assertEqual(gen, N_CLIENTS * MAX_TOKENS)
                self.assertEqual(prm, prompt_sum)
                # Back to baseline (the engine retires a request right after its last event).
                for _ in range(100):
                    m = server.metrics()
                    if m["deepinfer_running_requests"] == 0 and m["deepinfer_open_streams"] == 0:
                        break
                    time.sleep(0.05)
                self.assertEqual(m["deepinfer_running_requests"], 0)
                self.assertEqual(m["deepinfer_waiting_requests"], 0)
                self.assertEqual(m["deepinfer_open_streams"], 0)
                self.assertEqual(m['deepinfer_state_memory_bytes{kind="allocated"}'], 0)
                self.assertEqual(m['deepinfer_state_memory_bytes{kind="reserved"}'], 0)
                rss.append(server.rss_kib())
                ttfts = [r["ttft"] for r in results if r["ttft"] is not None]
                batch = (after["deepinfer_batch_size_sum"] - before["deepinfer_batch_size_sum"]) / max(
                    1, after["deepinfer_batch_size_count"] - before["deepinfer_batch_size_count"])
                print(f"round {rnd}: {N_CLIENTS} streams x {MAX_TOKENS} tokens in {wall:.2f} s, "
                      f"{gen / wall:.1f} generated tok/s, prompt tokens {prompt_sum}, mean batch {batch:.1f}, "
                      f"TTFT p50 {statistics.median(ttfts):.2f} s p99 {pct(ttfts, 99):.2f} s, "
                      f"server RSS {rss[-1] / 1024:.1f} MiB", flush=True)
            self.assertLess(rss[1] - rss[0], 32 * 1024, f"server RSS grew from {rss[0]} to {rss[1]} KiB")
        self.assertEqual(server.rc, 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
