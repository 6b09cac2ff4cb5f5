#!/usr/bin/env python3
"""Throughput baseline: transformers' DeepseekV4ForCausalLM (eager, random weights) with the same shapes as
bench/model_bench's "mid" preset, prefill N tokens then M greedy decode steps with the dynamic cache.
Prints the same line format as model_bench. Run on the GPU machine: tools/hf_baseline.py --dtype bf16"""
import argparse
import time

import torch
import transformers
from transformers import DeepseekV4Config, DeepseekV4ForCausalLM

p = argparse.ArgumentParser()
p.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
p.add_argument("--prompt", type=int, default=512)
p.add_argument("--decode", type=int, default=32)
p.add_argument("--batch", type=int, default=1)
p.add_argument("--preset", default="mid", choices=["mid", "flash"])
a = p.parse_args()
dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32

shapes = {  # bench/model_bench presets
    "mid": dict(vocab_size=32768, hidden_size=1024, num_hidden_layers=8, num_attention_heads=8, q_lora_rank=512,
                o_groups=4, o_lora_rank=512, compress_ratios=[0, 4, 128, 4, 128, 4, 128, 4, 0], index_n_heads=16,
                n_routed_experts=32, num_experts_per_tok=4, moe_intermediate_size=512),
    "flash": dict(vocab_size=129280, hidden_size=4096, num_hidden_layers=4, num_attention_heads=64, q_lora_rank=1024,
                  o_groups=8, o_lora_rank=1024, compress_ratios=[0, 0, 4, 128, 0], index_n_heads=64,
                  n_routed_experts=256, num_experts_per_tok=6, moe_intermediate_size=2048),
}[a.preset]
cfg = DeepseekV4Config(
    **shapes, head_dim=512, sliding_window=128, num_hash_layers=1, index_head_dim=128, index_topk=512,
    qk_rope_head_dim=64,
    rope_scaling={"type": "yarn", "factor": 16, "original_max_position_embeddings": 65536, "beta_fast": 32,
                  "beta_slow": 1}, max_position_embeddings=1048576)
torch.manual_seed(0)
with torch.device("cuda"):
    model = DeepseekV4ForCausalLM._from_config(cfg, dtype=dtype).eval()
with torch.no_grad():  # give routers something other than ties: random router weights and biases
    for m in model.modules():
        if hasattr(m, "tid2eid"):
            m.tid2eid.copy_(torch.randint(0, cfg.n_routed_experts, m.tid2eid.shape, device=m.tid2eid.device))
ids = torch.randint(0, cfg.vocab_size, (a.batch, a.prompt), device="cuda")


def run():
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = model(input_ids=ids, use_cache=True)
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    past, nxt = out.past_key_values, out.logits[:, -1:].argmax(-1)
    for _ in range(a.decode):
        out = model(input_ids=nxt, past_key_values=past, use_cache=True)
        past, nxt = out.past_key_values, out.logits[:, -1:].argmax(-1)
    torch.cuda.synchronize()
    return t1 - t0, time.perf_counter() - t1


with torch.no_grad():
    run()  # warm-up
    prefill, decode = run()
n = a.batch
print(f"transformers {transformers.__version__} torch {torch.__version__} {a.dtype} eager {a.preset} batch {n} on "
      f"{torch.cuda.get_device_name()}: prefill {n * a.prompt} tokens in {prefill:.3f} s = {n * a.prompt / prefill:.1f} "
      f"tokens/s; decode {a.decode} steps in {decode:.3f} s = {n * a.decode / decode:.2f} tokens/s, "
      f"{1e3 * decode / a.decode:.1f} ms/step")
