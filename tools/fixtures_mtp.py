"""v4_tiny_mtp: the v4_tiny_fp32 model with a multi-token-prediction block (spec section 6) in the official
layout, and that block's logits computed with transformers' own modules: the reference for deepinfer's
drafter (speculative decoding, docs/speculative.md).

transformers does not build the MTP block, so the reference is assembled here from its pieces, as spec
section 6 describes the official code: input = e_proj(enorm(Emb[next ids])) broadcast to every stream +
h_proj(hnorm(X)) per stream, X the main model's streams before its hc head; then a decoder layer of the
sliding-window, score-routed kind (transformers' DeepseekV4DecoderLayer built as the fixture's layer 5, which
is of that kind), the block's own hc head (DeepseekV4HyperHead) and norm, and the main model's lm_head.

Writes tests/data/v4_tiny_mtp/: config.json (v4_tiny_fp32's), main.safetensors (a link to v4_tiny_fp32's
tensors), mtp.safetensors (the block: FP8 128x128 blocks where the shape allows, FP4 experts, BF16 the rest,
F32 hc), model.safetensors.index.json over both, mtp.json (prompt) and mtp_logits.npy [n - 1, vocab]: the
block's logits at positions 0 .. n - 2 (each guessing the token two ahead).

    cd tools && python3 fixtures_mtp.py
"""
import json
import math
import os

import numpy as np
import torch
from safetensors.torch import save_file
from transformers.masking_utils import create_sliding_window_causal_mask
from transformers.models.deepseek_v4 import modeling_deepseek_v4 as v4

import fixtures_common as fc
import fixtures_fp8 as f8

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "tests/data/v4_tiny_fp32")
DST = os.path.join(ROOT, "tests/data/v4_tiny_mtp")
LAYER = 5  # the fixture's layer of the MTP block's kinds (sliding window, score-routed MoE)
D, H, HD, QL, G, R, E, I = 256, 4, 128, 128, 2, 128, 8, 32
N_TOKENS = 40
SEED = 20261205


def mtp_state(seed):
    w = f8.Writer(seed)
    p = "mtp.0."
    w.fp8(p + "e_proj", D, D)
    w.fp8(p + "h_proj", D, D)
    for n in ("enorm", "hnorm", "norm"):
        w.norm(p + n + ".weight", D)
    w.hc(p + "hc_head", 4)
    f8.block_norms_and_attention(w, p)
    w.bf16(p + "ffn.gate.weight", (E, D), 1 / math.sqrt(D))
    w.f32(p + "ffn.gate.bias", (E,), 0.3)
    for k in ("w1", "w3"):  # 32 rows: not a whole 128x128 block, so bf16
        w.bf16(p + f"ffn.shared_experts.{k}.weight", (I, D), 1 / math.sqrt(D))
    w.bf16(p + "ffn.shared_experts.w2.weight", (D, I), 1 / math.sqrt(I))
    for e in range(E):
        w.fp4(p + f"ffn.experts.{e}.w1", I, D)
        w.fp4(p + f"ffn.experts.{e}.w3", I, D)
        w.fp4(p + f"ffn.experts.{e}.w2", D, I)
    return w.t


def decoded(state, name):
    t = state[name + ".weight"] if name + ".weight" in state else state[name]
    if t.dtype == torch.float8_e4m3fn:
        s = state[name + ".scale"].view(torch.uint8).numpy()
        return torch.from_numpy(f8.decode_fp8_weight(t.view(torch.uint8).numpy(), s))
    return t.float()


def block_module(cfg, state):
    """transformers' decoder layer of the MTP block's kinds with the block's weights (decoded bytes)."""
    layer = v4.DeepseekV4DecoderLayer(cfg, LAYER)
    as_layer = {f"layers.{LAYER}." + k[len("mtp.0."):]: t for k, t in state.items()
                if not k[len("mtp.0."):].startswith(("e_proj", "h_proj", "enorm", "hnorm", "norm", "hc_head"))}
    hf = f8.decoded_hf_state(as_layer)
    prefix = f"model.layers.{LAYER}."
    sd = {k[len(prefix):]: torch.from_numpy(np.asarray(v)) for k, v in hf.items()}
    missing, unexpected = layer.load_state_dict(sd, strict=False)
    assert not unexpected, unexpected
    assert all(m.endswith("rotary_emb.inv_freq") or "inv_freq" in m for m in missing), missing
    return layer.float().eval()


def main():
    model = fc.load(SRC).float()
    cfg = model.config
    assert cfg.layer_types[LAYER] == fc.SLIDING and cfg.mlp_layer_types[LAYER] == "moe"
    state = mtp_state(SEED)
    layer = block_module(cfg, state)
    e_proj, h_proj = decoded(state, "mtp.0.e_proj"), decoded(state, "mtp.0.h_proj")
    norms = {}
    for n in ("enorm", "hnorm", "norm"):
        norms[n] = v4.DeepseekV4RMSNorm(D, eps=cfg.rms_norm_eps)
        norms[n].weight.data = decoded(state, f"mtp.0.{n}.weight")
    head = v4.DeepseekV4HyperHead(cfg)
    head.load_state_dict({"hc_fn": state["mtp.0.hc_head_fn"], "hc_base": state["mtp.0.hc_head_base"],
                          "hc_scale": state["mtp.0.hc_head_scale"]})
    head.float().eval()

    tokens = fc.make_prompt(SEED, n=N_TOKENS)
    ids = torch.tensor([tokens])
    captured = {}
    hook = model.model.hc_head.register_forward_hook(lambda m, inp, out: captured.update(x=inp[0]))
    with torch.no_grad():
        model(input_ids=ids)
        hook.remove()
        x = captured["x"][:, :-1]  # [1, n - 1, hc, D]: positions 0 .. n - 2
        nxt = ids[:, 1:]
        emb = model.model.embed_tokens(nxt)
        e = torch.nn.functional.linear(norms["enorm"](emb), e_proj)
        h = torch.nn.functional.linear(norms["hnorm"](x), h_proj)
        streams = h + e.unsqueeze(2)
        pos = torch.arange(nxt.shape[1]).unsqueeze(0)
        pe = {t: model.model.rotary_emb(emb, position_ids=pos, layer_type=t) for t in ("main", "compress")}
        mask = create_sliding_window_causal_mask(config=cfg, inputs_embeds=emb, attention_mask=None,
                                                 past_key_values=None, position_ids=pos)
        streams = layer(streams, position_embeddings=pe, position_ids=pos, attention_mask=mask, input_ids=nxt)
        logits = model.lm_head(norms["norm"](head(streams)))[0].float().numpy()

    os.makedirs(DST, exist_ok=True)
    with open(os.path.join(SRC, "config.json")) as f:
        config = json.load(f)
    with open(os.path.join(DST, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    link = os.path.join(DST, "main.safetensors")
    if os.path.lexists(link):
        os.remove(link)
    os.symlink("../v4_tiny_fp32/model.safetensors", link)
    save_file({k: t.contiguous() for k, t in state.items()}, os.path.join(DST, "mtp.safetensors"),
              metadata={"format": "pt"})
    from safetensors import safe_open
    with safe_open(os.path.join(SRC, "model.safetensors"), "pt") as f:
        main_names = list(f.keys())
    weight_map = {n: "main.safetensors" for n in main_names}
    weight_map.update({n: "mtp.safetensors" for n in state})
    with open(os.path.join(DST, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": dict(sorted(weight_map.items()))}, f, indent=1)
    np.save(os.path.join(DST, "mtp_logits.npy"), logits.astype(np.float32))
    with open(os.path.join(DST, "mtp.json"), "w") as f:
        json.dump({"tokens": tokens, "seed": SEED, "max_abs_logit": float(np.abs(logits).max()),
                   "note": "mtp_logits.npy row i: the MTP block at position i (streams of position i, "
                           "embedding of tokens[i + 1]), guessing tokens[i + 2]"}, f, indent=1)
    print(f"{DST}: {logits.shape} logits, max |logit| {np.abs(logits).max():.3f}")


if __name__ == "__main__":
    main()
