#!/usr/bin/env python3
"""Reference vectors for deepinfer's config folding (tests/model/config_vectors_test.cpp).

Each case is a config.json dict. transformers 5.17.0 (`DeepseekV4Config.from_dict`, then
`DeepseekV4RotaryEmbedding` for the two RoPE tables) folds it, and the folded fields, both rope dicts,
inv_freq (f32, stored as exact decimal and as the u32 bit pattern) and attention_scaling are recorded.
Error cases record what transformers does with them (raises at config time, or accepts: then the check is
deepinfer's own, with the reason in `why`).

Run: /opt/refenv/bin/python tools/make_config_vectors.py  (writes tests/data/config/vectors.json)
"""
import json
import math
import os
import struct

import torch
import transformers
from transformers import DeepseekV4Config
from transformers.activations import ACT2FN
from transformers.models.deepseek_v4.modeling_deepseek_v4 import DeepseekV4RotaryEmbedding

assert transformers.__version__ == "5.17.0", transformers.__version__

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "data", "config", "vectors.json")
V4 = {"architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4"}


def flash():
    # Released DeepSeek-V4-Flash config.json values (spec section 1.1 / 1.3).
    ratios = [0, 0] + [4 if i % 2 == 0 else 128 for i in range(2, 43)] + [0]
    assert len(ratios) == 44
    return {
        **V4, "vocab_size": 129280, "hidden_size": 4096, "num_hidden_layers": 43, "num_attention_heads": 64,
        "num_key_value_heads": 1, "head_dim": 512, "q_lora_rank": 1024, "qk_rope_head_dim": 64, "o_groups": 8,
        "o_lora_rank": 1024, "sliding_window": 128, "compress_ratios": ratios, "compress_rope_theta": 160000,
        "rope_theta": 10000,
        "rope_scaling": {"type": "yarn", "factor": 16, "original_max_position_embeddings": 65536,
                         "beta_fast": 32, "beta_slow": 1},
        "max_position_embeddings": 1048576, "index_n_heads": 64, "index_head_dim": 128, "index_topk": 512,
        "hc_mult": 4, "hc_sinkhorn_iters": 20, "hc_eps": 1e-6, "rms_norm_eps": 1e-6, "n_routed_experts": 256,
        "num_experts_per_tok": 6, "n_shared_experts": 1, "moe_intermediate_size": 2048,
        "scoring_func": "sqrtsoftplus", "routed_scaling_factor": 1.5, "norm_topk_prob": True,
        "num_hash_layers": 3, "swiglu_limit": 10.0, "hidden_act": "silu", "num_nextn_predict_layers": 1,
        "tie_word_embeddings": False, "bos_token_id": 0, "eos_token_id": 1, "torch_dtype": "bfloat16",
        "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                "scale_fmt": "ue8m0", "weight_block_size": [128, 128]},
        "expert_dtype": "fp4",
    }


def pro():
    c = flash()
    ratios = [128, 128] + [4 if i % 2 == 0 else 128 for i in range(2, 61)] + [0]
    assert len(ratios) == 62
    c.update({"hidden_size": 7168, "num_hidden_layers": 61, "num_attention_heads": 128, "q_lora_rank": 1536,
              "o_groups": 16, "index_topk": 1024, "n_routed_experts": 384, "moe_intermediate_size": 3072,
              "routed_scaling_factor": 2.5, "compress_ratios": ratios})
    return c


def small(**kw):
    c = {**V4, "vocab_size": 1000, "hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
         "head_dim": 64, "q_lora_rank": 32, "o_groups": 2, "o_lora_rank": 16, "sliding_window": 8,
         "index_n_heads": 2, "index_head_dim": 32, "index_topk": 4, "n_routed_experts": 8,
         "num_experts_per_tok": 2, "moe_intermediate_size": 32, "max_position_embeddings": 8192}
    c.update(kw)
    return c


NESTED_YARN = {"main": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.125},
               "compress": {"rope_type": "yarn", "rope_theta": 160000.0, "partial_rotary_factor": 0.125,
                            "factor": 16.0, "original_max_position_embeddings": 65536, "beta_fast": 32,
                            "beta_slow": 1}}

CASES = [
    ("flash", flash()),
    ("pro", pro()),
    ("defaults", {"model_type": "deepseek_v4"}),
    ("nested_yarn_no_attention_factor", {**V4, "rope_parameters": NESTED_YARN}),
    ("nested_mscale_ratio", small(partial_rotary_factor=0.25, rope_parameters={
        "main": {"rope_type": "default"},
        "compress": {"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096,
                     "mscale": 1.0, "mscale_all_dim": 0.707, "beta_fast": 0, "beta_slow": None}})),
    ("nested_factor_null", small(qk_rope_head_dim=16, rope_parameters={
        "main": {"rope_type": "default", "rope_theta": 20000, "partial_rotary_factor": 0.25},
        "compress": {"type": "yarn", "rope_theta": 40000.0, "partial_rotary_factor": 0.25, "factor": None,
                     "original_max_position_embeddings": 1024}})),
    ("flat_rope_parameters_attention_factor", small(max_position_embeddings=16384, rope_parameters={
        "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096, "beta_fast": 16,
        "beta_slow": 2, "attention_factor": 0.9}, compress_rope_theta=50000.0)),
    ("flat_attention_factor_null", small(rope_scaling={
        "type": "yarn", "factor": 8.0, "original_max_position_embeddings": 1024, "attention_factor": None})),
    ("legacy_small", small(compress_ratios=[0, 4, 128, 4, 0], compress_rate_csa=2, compress_rate_hca=8,
                           num_hash_layers=1, qk_rope_head_dim=16, eos_token_id=[1, 2], bos_token_id=None,
                           rope_theta=5000, rope_scaling={"type": "yarn", "factor": None,
                                                          "original_max_position_embeddings": 2048})),
    ("explicit_layer_types", small(
        layer_types=["sliding_attention", "heavily_compressed_attention", "compressed_sparse_attention",
                     "sliding_attention", "heavily_compressed_attention"],
        mlp_layer_types=["moe", "hash_moe", "moe", "moe"],
        compress_rates={"compressed_sparse_attention": 8, "heavily_compressed_attention": 64},
        compress_ratios=[7, 7], scoring_func="sigmoid", partial_rotary_factor=0.5,
        rope_scaling={"rope_type": "default", "factor": 3.0})),
    ("default_schedule_seven_layers", small(num_hidden_layers=7, num_hash_layers=5, dtype="float32",
                                            torch_dtype="bfloat16", rope_scaling={})),
    ("yarn_low_equals_high", small(head_dim=64, partial_rotary_factor=0.125, compress_rope_theta=10000.0, rope_scaling={
        "type": "yarn", "factor": 4.0, "original_max_position_embeddings": 6350000000, "beta_fast": 32,
        "beta_slow": 1})),
    ("yarn_small_dims", small(head_dim=32, partial_rotary_factor=0.5, index_head_dim=16, rope_theta=10000.0,
                              compress_rope_theta=1000.0, rope_scaling={
                                  "type": "yarn", "factor": 2.0, "original_max_position_embeddings": 64,
                                  "beta_fast": 4, "beta_slow": 0.5})),
]

# (name, config, field our error must name, why deepinfer rejects it when transformers' config accepts it)
ERROR_CASES = [
    ("compress_ratio_5", small(compress_ratios=[0, 4, 128, 5]), "compress_ratios", None),
    ("compress_ratio_mtp_5", small(compress_ratios=[0, 4, 128, 4, 5]), "compress_ratios", None),
    ("compress_ratios_short", small(compress_ratios=[0, 4, 128]), "compress_ratios", None),
    ("layer_types_length", small(layer_types=["sliding_attention"] * 3), "layer_types", None),
    ("layer_types_unknown", small(layer_types=["full_attention"] * 4), "layer_types", None),
    ("mlp_layer_types_unknown", small(mlp_layer_types=["dense"] * 4), "mlp_layer_types", None),
    ("yarn_missing_factor", small(rope_scaling={"type": "yarn", "original_max_position_embeddings": 1024}),
     "factor", None),
    ("nested_missing_compress", small(rope_parameters={"main": {"rope_type": "default"}}), "rope_parameters",
     None),
    ("hidden_size_float", small(hidden_size=64.0), "hidden_size", None),
    ("hc_eps_int", small(hc_eps=0), "hc_eps", None),
    ("eos_string", small(eos_token_id="x"), "eos_token_id", None),
    ("vocab_null", small(vocab_size=None), "vocab_size", None),
    ("scoring_softmax", small(scoring_func="softmax"), "scoring_func",
     "transformers' config accepts it but the router's ACT2FN['softmax'] lookup raises KeyError"),
    ("scoring_bogus", small(scoring_func="bogus"), "scoring_func", "same as softmax"),
    ("odd_rope_dim", small(partial_rotary_factor=0.1, head_dim=50), "partial_rotary_factor",
     "int(50 * 0.1) = 5 rotary dims cannot form pairs"),
    ("heads_not_divisible", small(num_attention_heads=6, o_groups=4), "o_groups",
     "grouped output projection needs num_attention_heads % o_groups == 0"),
    ("topk_gt_experts", small(num_experts_per_tok=9), "num_experts_per_tok", "cannot pick 9 of 8 experts"),
    ("negative_hidden", small(hidden_size=-3), "hidden_size", "sizes must be positive"),
    ("zero_layers", small(num_hidden_layers=0), "num_hidden_layers", "sizes must be positive"),
    ("nested_main_without_pf", {**V4, "rope_parameters": {"main": {"rope_type": "default"},
                                                         "compress": NESTED_YARN["compress"]}},
     "rope_parameters.main.partial_rotary_factor",
     "transformers builds a 512-dim main table (partial_rotary_factor defaults to 1.0 in the sub-dict) and "
     "model construction fails (spec 1.2)"),
    ("unknown_architecture", {"architectures": ["LlamaForCausalLM"], "model_type": "llama"}, "architecture",
     "transformers' DeepseekV4Config.from_dict only warns about a model_type mismatch"),
]


def f32_bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def rope_dict(d):
    return {k: v for k, v in d.items()}


def fold(cfg_dict):
    c = DeepseekV4Config.from_dict(json.loads(json.dumps(cfg_dict)))
    rot = DeepseekV4RotaryEmbedding(c)
    tables = {}
    for label in ("main", "compress"):
        inv = getattr(rot, f"{label}_inv_freq")
        assert inv.dtype == torch.float32
        vals = inv.tolist()
        tables[label] = {"inv_freq": vals, "inv_freq_bits": [f32_bits(v) for v in vals],
                         "attention_scaling": float(getattr(rot, f"{label}_attention_scaling"))}
    dtype = c.dtype
    expect = {
        "vocab_size": c.vocab_size, "hidden_size": c.hidden_size, "num_hidden_layers": c.num_hidden_layers,
        "num_attention_heads": c.num_attention_heads, "head_dim": c.head_dim, "q_lora_rank": c.q_lora_rank,
        "o_groups": c.o_groups, "o_lora_rank": c.o_lora_rank, "sliding_window": c.sliding_window,
        "index_n_heads": c.index_n_heads, "index_head_dim": c.index_head_dim, "index_topk": c.index_topk,
        "hc_mult": c.hc_mult, "hc_sinkhorn_iters": c.hc_sinkhorn_iters, "hc_eps": c.hc_eps,
        "rms_norm_eps": c.rms_norm_eps, "n_routed_experts": c.n_routed_experts,
        "num_experts_per_tok": c.num_experts_per_tok, "n_shared_experts": c.n_shared_experts,
        "moe_intermediate_size": c.moe_intermediate_size, "scoring_func": c.scoring_func,
        "routed_scaling_factor": c.routed_scaling_factor, "swiglu_limit": c.swiglu_limit,
        "max_position_embeddings": c.max_position_embeddings, "bos_token_id": c.bos_token_id,
        "eos_token_id": c.eos_token_id, "tie_word_embeddings": c.tie_word_embeddings,
        "num_nextn_predict_layers": c.num_nextn_predict_layers,
        "layer_types": c.layer_types, "mlp_layer_types": c.mlp_layer_types, "compress_rates": c.compress_rates,
        "partial_rotary_factor": c.partial_rotary_factor, "qk_rope_head_dim": c.qk_rope_head_dim,
        "rope_parameters": {k: rope_dict(v) for k, v in c.rope_parameters.items()},
        "dtype": str(dtype).replace("torch.", "") if dtype is not None else None,
        "quantization_config": getattr(c, "quantization_config", None),
        "expert_dtype": getattr(c, "expert_dtype", None),
        "tables": tables,
    }
    return expect


def hf_outcome(cfg_dict):
    try:
        c = DeepseekV4Config.from_dict(json.loads(json.dumps(cfg_dict)))
    except Exception as e:  # noqa: BLE001 - we record whatever transformers raises
        return f"raises {type(e).__name__}: {str(e).splitlines()[0][:160]}"
    try:
        ACT2FN[c.scoring_func]
    except KeyError:
        return "config accepts; ACT2FN[scoring_func] raises KeyError"
    rot = DeepseekV4RotaryEmbedding(c)
    return (f"config accepts (main inv_freq has {rot.main_inv_freq.numel()} entries, "
            f"qk_rope_head_dim {c.qk_rope_head_dim})")


def main():
    out = {"generator": "tools/make_config_vectors.py", "transformers": transformers.__version__,
           "torch": torch.__version__, "cases": [], "error_cases": []}
    for name, cfg in CASES:
        out["cases"].append({"name": name, "config": cfg, "expect": fold(cfg)})
    for name, cfg, field, why in ERROR_CASES:
        outcome = hf_outcome(cfg)
        if why is None:
            assert outcome.startswith("raises"), (name, outcome)
        out["error_cases"].append({"name": name, "config": cfg, "field": field, "transformers": outcome,
                                   "why": why})
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(f"wrote {OUT}: {len(out['cases'])} cases, {len(out['error_cases'])} error cases")
    # A spot check against spec 3.3's published values for the released compress table.
    flash_c = out["cases"][0]["expect"]["tables"]["compress"]["inv_freq"]
    assert math.isclose(flash_c[1], 6.876560e-1, rel_tol=1e-6), flash_c[1]


if __name__ == "__main__":
    main()
