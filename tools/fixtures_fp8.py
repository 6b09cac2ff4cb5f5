"""v4_tiny_fp8: the spec section 12 model written in the official DeepSeek layout and naming.

FP8 e4m3 (128x128 blocks, UE8M0 scales) for wq_a/wq_b/wkv/wo_a/wo_b/indexer.wq_b/shared experts, packed
FP4 e2m1 (1x32 UE8M0) routed experts, BF16 embed/head/norms/router/compressor/indexer projections,
F32 hc_*/attn_sink/ape/gate.bias, I64 tid2eid, a few mtp.0.* tensors, two shards plus an index.
HF loads it dequantized on CPU (needs the `accelerate` package), then .float() gives the fp32 model.
"""
import json
import math
import os
import shutil

import numpy as np
import torch
from safetensors.torch import save_file

import fixtures_common as fc

E4M3_MAX = 448.0
FP4_LUT = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], dtype=np.float32)
N_LAYERS, D, V, E, K_E, I = 6, 256, 256, 8, 2, 128
H, HD, QL, G, R = 4, 128, 128, 2, 128
NIH, IHD = 8, 64
RATE = {fc.CSA: 4, fc.HCA: 16}


def official_config():
    return {
        "architectures": ["DeepseekV4ForCausalLM"],
        "model_type": "deepseek_v4",
        "vocab_size": V, "hidden_size": D, "moe_intermediate_size": I, "num_hidden_layers": N_LAYERS,
        "num_attention_heads": H, "num_key_value_heads": 1, "head_dim": HD, "qk_rope_head_dim": 16,
        "q_lora_rank": QL, "o_groups": G, "o_lora_rank": R,
        "n_routed_experts": E, "n_shared_experts": 1, "num_experts_per_tok": K_E, "num_hash_layers": 2,
        # official per-layer list (+1 MTP entry); only 0/4/128 are accepted, so HCA is "128" here and
        # its real rate comes from the legacy scalar compress_rate_hca (spec 1.2 steps 2-3)
        "compress_ratios": [0, 4, 128, 4, 128, 0, 0], "compress_rate_hca": 16,
        "sliding_window": 8, "index_n_heads": NIH, "index_head_dim": IHD, "index_topk": 4,
        "hc_mult": 4, "hc_sinkhorn_iters": 6, "hc_eps": 1e-6, "swiglu_limit": 0.75,
        "routed_scaling_factor": 1.5, "scoring_func": "sqrtsoftplus", "topk_method": "noaux_tc",
        "norm_topk_prob": True, "rms_norm_eps": 1e-6, "rope_theta": 10000, "compress_rope_theta": 160000,
        "rope_scaling": {"type": "yarn", "factor": 4, "original_max_position_embeddings": 4096,
                         "beta_fast": 32, "beta_slow": 1},
        "max_position_embeddings": 16384, "bos_token_id": 0, "eos_token_id": 1, "tie_word_embeddings": False,
        "num_nextn_predict_layers": 1, "torch_dtype": "bfloat16", "expert_dtype": "fp4",
        "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "scale_fmt": "ue8m0",
                                "weight_block_size": [128, 128], "activation_scheme": "dynamic"},
    }


LAYER_TYPES = fc.LAYER_TYPES


# ---------------------------------------------------------------------------------------------
# Encoders (float -> bytes) and the independent numpy decoders (bytes -> float)


def quant_fp8(w, gen):
    """[R, C] fp32 -> (e4m3 bytes uint8 [R, C], ue8m0 bytes uint8 [R/128, C/128]); random extra
    exponent 0..2 per block so scales differ and small values reach the subnormal codes."""
    r, c = w.shape
    assert r % 128 == 0 and c % 128 == 0, w.shape
    blocks = w.reshape(r // 128, 128, c // 128, 128)
    amax = blocks.abs().amax(dim=(1, 3)).clamp_min(1e-30)
    extra = torch.randint(0, 3, amax.shape, generator=gen)
    exp = torch.ceil(torch.log2(amax / E4M3_MAX)).to(torch.int64) + extra
    scale = torch.exp2(exp.double()).float()
    q = (blocks / scale[:, None, :, None]).reshape(r, c).to(torch.float8_e4m3fn).view(torch.uint8)
    assert not ((q == 0x7F) | (q == 0xFF)).any()
    return q, (exp + 127).to(torch.uint8)


def quant_fp4(w, gen):
    """[R, C] fp32 -> (packed int8 [R, C/2] low nibble = even column, ue8m0 uint8 [R, C/32])."""
    r, c = w.shape
    g = w.reshape(r, c // 32, 32)
    amax = g.abs().amax(dim=2).clamp_min(1e-30)
    exp = torch.ceil(torch.log2(amax / 6.0)).to(torch.int64) + torch.randint(0, 2, amax.shape, generator=gen)
    x = (g / torch.exp2(exp.double()).float()[:, :, None]).reshape(r, c)
    mags = torch.tensor(FP4_LUT[:8])
    code = torch.argmin((x.abs()[..., None] - mags).abs(), dim=-1)
    code = code + 8 * (x < 0).long()  # sign bit; a zero of negative x becomes -0 (code 8)
    code = code.to(torch.uint8)
    packed = (code[:, 0::2] | (code[:, 1::2] << 4)).view(torch.int8)
    return packed, (exp + 127).to(torch.uint8)


def decode_e4m3(b):
    b = b.astype(np.int64)
    sign = np.where(b >> 7, -1.0, 1.0)
    e, f = (b >> 3) & 0xF, b & 7
    assert not ((e == 15) & (f == 7)).any(), "NaN code"
    val = np.where(e == 0, (f / 8.0) * 2.0 ** -6, (1 + f / 8.0) * np.exp2(e - 7.0))
    return (sign * val).astype(np.float32)


def decode_ue8m0(s):
    s = s.astype(np.int64)
    assert (s != 255).all()
    return np.exp2(s - 127.0).astype(np.float32)


def decode_fp8_weight(q, s):
    w = decode_e4m3(q)
    full = np.kron(decode_ue8m0(s), np.ones((128, 128), dtype=np.float32))
    return w * full


def decode_fp4_weight(packed, s):
    u = packed.view(np.uint8).astype(np.int64)
    vals = np.stack([FP4_LUT[u & 0xF], FP4_LUT[u >> 4]], axis=-1).reshape(u.shape[0], -1)
    return vals * np.repeat(decode_ue8m0(s), 32, axis=1)


# ---------------------------------------------------------------------------------------------
# Official-format state dict


class Writer:
    def __init__(self, seed):
        self.gen = torch.Generator().manual_seed(seed)
        self.t = {}  # official name -> torch tensor as stored on disk

    def normal(self, shape, std, mean=0.0):
        return torch.randn(shape, generator=self.gen) * std + mean

    def fp8(self, name, out, inp):
        q, s = quant_fp8(self.normal((out, inp), 1 / math.sqrt(inp)), self.gen)
        self.t[name + ".weight"] = q.view(torch.float8_e4m3fn)
        self.t[name + ".scale"] = s.view(torch.float8_e8m0fnu)

    def fp4(self, name, out, inp):
        q, s = quant_fp4(self.normal((out, inp), 1 / math.sqrt(inp)), self.gen)
        self.t[name + ".weight"] = q
        self.t[name + ".scale"] = s.view(torch.float8_e8m0fnu)

    def bf16(self, name, shape, std, mean=0.0):
        self.t[name] = self.normal(shape, std, mean).to(torch.bfloat16)

    def f32(self, name, shape, std):
        self.t[name] = self.normal(shape, std)

    def norm(self, name, n):
        self.bf16(name, (n,), 0.2, 1.0)

    def hc(self, prefix, n_out):
        self.f32(prefix + "_fn", (n_out, 4 * D), 0.05)
        self.f32(prefix + "_base", (n_out,), 0.5)
        self.t[prefix + "_scale"] = torch.rand((3 if n_out == 24 else 1,), generator=self.gen) + 0.5


def compressor(w, p, dim, rate, overlap):
    width = 2 * dim if overlap else dim
    w.f32(p + "ape", (rate, width), 0.5)
    w.bf16(p + "wkv.weight", (width, D), 1 / math.sqrt(D))
    w.bf16(p + "wgate.weight", (width, D), 1 / math.sqrt(D))
    w.norm(p + "norm.weight", dim)


def block_norms_and_attention(w, p):
    """A block's norms, mHC mixes and the attention every layer kind has, in the order of their draws
    (the main layers here, the MTP block in fixtures_mtp.py)."""
    w.norm(p + "attn_norm.weight", D)
    w.norm(p + "ffn_norm.weight", D)
    w.hc(p + "hc_attn", 24)
    w.hc(p + "hc_ffn", 24)
    w.f32(p + "attn.attn_sink", (H,), 1.0)
    w.fp8(p + "attn.wq_a", QL, D)
    w.norm(p + "attn.q_norm.weight", QL)
    w.fp8(p + "attn.wq_b", H * HD, QL)
    w.fp8(p + "attn.wkv", HD, D)
    w.norm(p + "attn.kv_norm.weight", HD)
    w.fp8(p + "attn.wo_a", G * R, H * HD // G)
    w.fp8(p + "attn.wo_b", D, G * R)


def build_state(seed):
    w = Writer(seed)
    w.bf16("embed.weight", (V, D), 1.0)
    for i, lt in enumerate(LAYER_TYPES):
        p = f"layers.{i}."
        block_norms_and_attention(w, p)
        if lt != fc.SLIDING:
            compressor(w, p + "attn.compressor.", HD, RATE[lt], lt == fc.CSA)
        if lt == fc.CSA:
            w.fp8(p + "attn.indexer.wq_b", NIH * IHD, QL)
            w.bf16(p + "attn.indexer.weights_proj.weight", (NIH, D), 1 / math.sqrt(D))
            compressor(w, p + "attn.indexer.compressor.", IHD, RATE[lt], True)
        w.bf16(p + "ffn.gate.weight", (E, D), 1 / math.sqrt(D))
        if i < 2:
            w.t[p + "ffn.gate.tid2eid"] = torch.stack([torch.randperm(E, generator=w.gen)[:K_E] for _ in range(V)])
        else:
            w.f32(p + "ffn.gate.bias", (E,), 0.3)
        w.fp8(p + "ffn.shared_experts.w1", I, D)
        w.fp8(p + "ffn.shared_experts.w3", I, D)
        w.fp8(p + "ffn.shared_experts.w2", D, I)
        for e in range(E):
            w.fp4(p + f"ffn.experts.{e}.w1", I, D)
            w.fp4(p + f"ffn.experts.{e}.w3", I, D)
            w.fp4(p + f"ffn.experts.{e}.w2", D, I)
    w.norm("norm.weight", D)
    w.hc("hc_head", 4)
    w.bf16("head.weight", (V, D), 1 / math.sqrt(D))
    # MTP block pieces (HF ignores mtp.*; a C++ loader must skip them too)
    w.fp8("mtp.0.e_proj", D, D)
    w.fp8("mtp.0.h_proj", D, D)
    for n in ("enorm", "hnorm", "norm"):
        w.norm(f"mtp.0.{n}.weight", D)
    w.hc("mtp.0.hc_head", 4)
    w.fp8("mtp.0.attn.wq_a", QL, D)
    w.fp4("mtp.0.ffn.experts.0.w1", I, D)
    return w.t


def write_checkpoint(state, path):
    """Two shards + model.safetensors.index.json, like the released checkpoints."""
    os.makedirs(path, exist_ok=True)
    names = sorted(state)
    first = [n for n in names if n.startswith("embed.") or any(n.startswith(f"layers.{i}.") for i in range(3))]
    shards = {"model-00001-of-00002.safetensors": first,
              "model-00002-of-00002.safetensors": [n for n in names if n not in set(first)]}
    weight_map = {}
    for fname, keys in shards.items():
        save_file({k: state[k].contiguous() for k in keys}, os.path.join(path, fname), metadata={"format": "pt"})
        weight_map.update({k: fname for k in keys})
    total = sum(t.numel() * t.element_size() for t in state.values())
    fc.write_json(os.path.join(path, "model.safetensors.index.json"),
                  {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))})
    fc.write_json(os.path.join(path, "config.json"), official_config())


# ---------------------------------------------------------------------------------------------
# Direct decode of every tensor into HF-internal names, compared with the loaded HF model


def hf_name(official):
    """Spec 2.4 table (independent of transformers' conversion_mapping)."""
    n = official
    top = {"embed.weight": "model.embed_tokens.weight", "head.weight": "lm_head.weight",
           "norm.weight": "model.norm.weight", "hc_head_fn": "model.hc_head.hc_fn",
           "hc_head_base": "model.hc_head.hc_base", "hc_head_scale": "model.hc_head.hc_scale"}
    if n in top:
        return top[n]
    layer, rest = n.split(".", 2)[1], n.split(".", 2)[2]
    subs = [("attn_norm.", "input_layernorm."), ("ffn_norm.", "post_attention_layernorm."),
            ("hc_attn_fn", "attn_hc.fn"), ("hc_attn_base", "attn_hc.base"), ("hc_attn_scale", "attn_hc.scale"),
            ("hc_ffn_fn", "ffn_hc.fn"), ("hc_ffn_base", "ffn_hc.base"), ("hc_ffn_scale", "ffn_hc.scale"),
            ("attn.attn_sink", "self_attn.sinks"),
            ("attn.indexer.compressor.wkv.", "self_attn.compressor.indexer.kv_proj."),
            ("attn.indexer.compressor.wgate.", "self_attn.compressor.indexer.gate_proj."),
            ("attn.indexer.compressor.norm.", "self_attn.compressor.indexer.kv_norm."),
            ("attn.indexer.compressor.ape", "self_attn.compressor.indexer.position_bias"),
            ("attn.indexer.wq_b.", "self_attn.compressor.indexer.q_b_proj."),
            ("attn.indexer.weights_proj.", "self_attn.compressor.indexer.scorer.weights_proj."),
            ("attn.compressor.wkv.", "self_attn.compressor.kv_proj."),
            ("attn.compressor.wgate.", "self_attn.compressor.gate_proj."),
            ("attn.compressor.norm.", "self_attn.compressor.kv_norm."),
            ("attn.compressor.ape", "self_attn.compressor.position_bias"),
            ("attn.wq_a.", "self_attn.q_a_proj."), ("attn.q_norm.", "self_attn.q_a_norm."),
            ("attn.wq_b.", "self_attn.q_b_proj."), ("attn.wkv.", "self_attn.kv_proj."),
            ("attn.kv_norm.", "self_attn.kv_norm."), ("attn.wo_a.", "self_attn.o_a_proj."),
            ("attn.wo_b.", "self_attn.o_b_proj."), ("ffn.gate.bias", "mlp.gate.e_score_correction_bias"),
            ("ffn.gate.", "mlp.gate."), ("ffn.shared_experts.w1.", "mlp.shared_experts.gate_proj."),
            ("ffn.shared_experts.w3.", "mlp.shared_experts.up_proj."),
            ("ffn.shared_experts.w2.", "mlp.shared_experts.down_proj.")]
    for a, b in subs:
        if rest.startswith(a):
            return f"model.layers.{layer}.{b}{rest[len(a):]}"
    raise KeyError(official)


def decoded_hf_state(state):
    """Direct numpy decode of the stored bytes, keyed by HF-internal names (experts stacked)."""
    out, experts = {}, {}
    for name, t in state.items():
        if name.startswith("mtp.") or name.endswith(".scale"):
            continue
        if ".ffn.experts." in name:
            layer, e, proj = name.split(".")[1], int(name.split(".")[4]), name.split(".")[5]
            scale = state[name[:-len("weight")] + "scale"].view(torch.uint8).numpy()
            experts[(layer, proj, e)] = decode_fp4_weight(t.numpy(), scale)
            continue
        if t.dtype == torch.float8_e4m3fn:
            scale = state[name[:-len("weight")] + "scale"].view(torch.uint8).numpy()
            val = decode_fp8_weight(t.view(torch.uint8).numpy(), scale)
        elif t.dtype == torch.bfloat16:
            val = t.float().numpy()
        else:
            val = t.numpy()
        out[hf_name(name)] = val
    for layer in sorted({k[0] for k in experts}):
        gu = [np.concatenate([experts[(layer, "w1", e)], experts[(layer, "w3", e)]]) for e in range(E)]
        out[f"model.layers.{layer}.mlp.experts.gate_up_proj"] = np.stack(gu)
        out[f"model.layers.{layer}.mlp.experts.down_proj"] = np.stack([experts[(layer, "w2", e)] for e in range(E)])
    return out


def verify_decode(model, state):
    """Every HF parameter/buffer must equal the direct decode exactly (bitwise, -0 == 0)."""
    ref = decoded_hf_state(state)
    sd = model.state_dict()
    assert set(ref) == set(sd), (set(ref) ^ set(sd))
    for k, v in ref.items():
        got = sd[k].numpy()
        assert got.dtype == v.dtype and np.array_equal(got, v), f"HF dequantized {k} differs from the byte decode"
    # cross-check the e4m3 decoder against torch's own float8 conversion
    for name, t in state.items():
        if t.dtype == torch.float8_e4m3fn:
            assert np.array_equal(decode_e4m3(t.view(torch.uint8).numpy()), t.float().numpy()), name
    return len(ref)


def code_stats(state):
    fp8 = torch.cat([t.view(torch.uint8).flatten() for t in state.values() if t.dtype == torch.float8_e4m3fn])
    fp4 = torch.cat([t.view(torch.uint8).flatten() for n, t in state.items() if t.dtype == torch.int8])
    nib = torch.cat([fp4 & 0xF, fp4 >> 4])
    e = (fp8 >> 3) & 0xF
    scales = torch.cat([t.view(torch.uint8).flatten() for t in state.values() if t.dtype == torch.float8_e8m0fnu])
    return {"fp8_distinct_codes": int(fp8.unique().numel()), "fp8_subnormal_codes": int(((e == 0) & (fp8 & 7 != 0)).sum()),
            "fp8_zero_codes": int(((fp8 & 0x7F) == 0).sum()), "fp4_distinct_nibbles": int(nib.unique().numel()),
            "ue8m0_min": int(scales.min()), "ue8m0_max": int(scales.max())}


def make(name, out_root, mf):
    final = os.path.join(out_root, name)
    tmp = final + ".tmp"
    holder = {}

    def build(seed):
        shutil.rmtree(tmp, ignore_errors=True)
        state = build_state(seed)
        write_checkpoint(state, tmp)
        loaded = fc.load(tmp)  # CPU: the FP8 quantizer dequantizes at load
        holder["load_dtypes"] = sorted({str(t.dtype) for t in loaded.state_dict().values()})
        model = loaded.float()
        holder["n_verified"] = verify_decode(model, state)
        holder["codes"] = code_stats(state)
        as32 = fc.load(tmp, dtype=torch.float32).float()
        for k, v in model.state_dict().items():
            assert torch.equal(v, as32.state_dict()[k]), k
        return model

    seed, model, prompt, logits, rec, cont, grec, tried = mf.search_with(name, build)
    meta = mf.common_meta(name, seed, tried, model, prompt, logits, rec, cont, grec)
    inc, _ = mf.incremental_checks(model, prompt, logits)
    inc.update(mf.decisions_in_chunked(model, prompt, rec))
    meta["incremental"] = inc
    meta["clamp_fire_fraction"] = fc.clamp_stats(model, prompt)
    meta["dtype"] = ("official DeepSeek layout: FP8 e4m3 128x128 + UE8M0 (wq_a, wq_b, wkv, wo_a, wo_b, "
                     "indexer.wq_b, shared experts, mtp e_proj/h_proj), FP4 e2m1 1x32 + UE8M0 routed experts, "
                     "BF16 embed/head/norms/gate/compressor/indexer projections, F32 hc_*/attn_sink/ape/gate.bias, "
                     "I64 tid2eid; goldens from HF fp32 model (from_pretrained on CPU = dequantize, then .float())")
    meta["dequant_check"] = {
        "hf_tensors_equal_to_numpy_byte_decode": holder["n_verified"],
        "statement": "every HF state_dict tensor after from_pretrained + .float() equals a direct numpy decode of "
                     "the stored bytes exactly (spec 2.2/2.3 formulas), and from_pretrained(dtype=float32) "
                     "+ .float() gives the same tensors",
        "dtypes_after_default_load": holder["load_dtypes"],
        "code_stats": holder["codes"],
    }
    meta["mtp_tensors"] = "mtp.0.* tensors are present in shard 2 and must be ignored (HF drops them)"
    mf.write_goldens(tmp, prompt, logits, cont, meta)
    shutil.rmtree(final, ignore_errors=True)
    os.rename(tmp, final)
    print(f"{name}: done, seed {seed}, incremental dev {inc['chunked_max_rel_dev']:.2e}", flush=True)
