"""Shared pieces of the DeepSeek-V4 golden-fixture generator (see tools/make_fixtures.py).

Configs of spec section 12, the weight recipe, and the reference runs on transformers 5.17.0
(CPU): full forward with captured discrete decisions, tie margins, chunked decode, greedy.
"""
import copy
import json
import math

import numpy as np
import torch
import transformers
from transformers import DeepseekV4Config, DeepseekV4ForCausalLM
from transformers.models.deepseek_v4 import modeling_deepseek_v4 as v4

CSA = "compressed_sparse_attention"
HCA = "heavily_compressed_attention"
SLIDING = "sliding_attention"
LAYER_TYPES = [SLIDING, CSA, HCA, CSA, HCA, SLIDING]
MLP_TYPES = ["hash_moe", "hash_moe", "moe", "moe", "moe", "moe"]
YARN = {"factor": 4.0, "original_max_position_embeddings": 4096, "beta_fast": 32.0, "beta_slow": 1.0}

N_PROMPT = 60
GREEDY_PREFIX = 20
GREEDY_NEW = 130
DECODE_CHUNKS = [20, 3, 5, 16]  # then single tokens to the end of the prompt
MIN_REL_GAP = 1e-4


def base_config(moe_dim, swiglu_limit, sinkhorn_iters, hc_eps, scoring, scaling):
    """Spec section 12 config in HF-native keys (rope keys are added by the caller)."""
    return {
        "architectures": ["DeepseekV4ForCausalLM"],
        "model_type": "deepseek_v4",
        "vocab_size": 256,
        "hidden_size": 256,
        "num_hidden_layers": 6,
        "num_attention_heads": 4,
        "num_key_value_heads": 1,
        "head_dim": 128,
        "q_lora_rank": 128,
        "o_groups": 2,
        "o_lora_rank": 128,
        "layer_types": LAYER_TYPES,
        "mlp_layer_types": MLP_TYPES,
        "compress_rates": {CSA: 4, HCA: 16},
        "sliding_window": 8,
        "index_n_heads": 8,
        "index_head_dim": 64,
        "index_topk": 4,
        "n_routed_experts": 8,
        "n_shared_experts": 1,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": moe_dim,
        "scoring_func": scoring,
        "routed_scaling_factor": scaling,
        "swiglu_limit": swiglu_limit,
        "hc_mult": 4,
        "hc_sinkhorn_iters": sinkhorn_iters,
        "hc_eps": hc_eps,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "compress_rope_theta": 160000.0,
        "max_position_embeddings": 16384,
        "bos_token_id": 0,
        "eos_token_id": 1,
        "tie_word_embeddings": False,
    }


def rope_flat(cfg, factor):
    """Variant A: official flat rope_scaling (HF injects attention_factor = 1.0)."""
    cfg = dict(cfg, partial_rotary_factor=factor)
    cfg["rope_scaling"] = dict(type="yarn", **YARN)
    return cfg


def rope_nested(cfg, factor):
    """Variant B: nested rope_parameters, compress yarn WITHOUT attention_factor."""
    cfg = dict(cfg, partial_rotary_factor=factor)
    cfg["rope_parameters"] = {
        "main": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": factor},
        "compress": dict(rope_type="yarn", rope_theta=160000.0, partial_rotary_factor=factor, **YARN),
    }
    return cfg


def hf_config(cfg_dict):
    # deep copy: DeepseekV4Config edits the rope dicts it is given in place
    kw = {k: copy.deepcopy(v) for k, v in cfg_dict.items() if k not in ("architectures", "model_type")}
    return DeepseekV4Config(**kw)


# ---------------------------------------------------------------------------------------------
# Weight recipe (spec section 12)


def recipe_tensor(name, shape, dtype, gen, n_experts):
    """Value for one HF-internal state_dict entry; raises for a name the recipe does not know."""
    def normal(std, mean=0.0):
        return torch.randn(shape, generator=gen, dtype=torch.float32) * std + mean

    leaf = name.rsplit(".", 1)[-1]
    if name.endswith("tid2eid"):
        vocab, k = shape
        rows = [torch.randperm(n_experts, generator=gen)[:k] for _ in range(vocab)]
        return torch.stack(rows).to(torch.int64)
    if name.endswith("embed_tokens.weight"):
        return normal(1.0)
    if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
        return normal(0.2, 1.0)
    if leaf in ("fn", "hc_fn"):
        return normal(0.05)
    if leaf in ("base", "hc_base"):
        return normal(0.5)
    if leaf in ("scale", "hc_scale"):
        return torch.rand(shape, generator=gen) + 0.5
    if leaf == "sinks":
        return normal(1.0)
    if leaf == "position_bias":
        return normal(0.5)
    if leaf == "e_score_correction_bias":
        return normal(0.3)
    if leaf in ("gate_up_proj", "down_proj") and len(shape) == 3:
        return normal(1.0 / math.sqrt(shape[2]))
    if leaf == "weight" and len(shape) == 2:
        return normal(1.0 / math.sqrt(shape[1]))
    raise ValueError(f"weight recipe has no rule for {name} {tuple(shape)} {dtype}")


def init_weights(model, seed):
    """Overwrite every persistent tensor (HF init zeroes sinks, biases, tid2eid, mHC base...)."""
    gen = torch.Generator().manual_seed(seed)
    sd = model.state_dict()
    new = {}
    for name in sorted(sd):
        t = sd[name]
        new[name] = recipe_tensor(name, tuple(t.shape), t.dtype, gen, model.config.n_routed_experts).to(t.dtype)
    missing, unexpected = model.load_state_dict(new, strict=True)
    assert not missing and not unexpected
    return model


def make_prompt(seed, vocab=256, n=N_PROMPT):
    gen = torch.Generator().manual_seed(seed + 1_000_003)
    return torch.randint(0, vocab, (n,), generator=gen).tolist()


# ---------------------------------------------------------------------------------------------
# Capturing discrete decisions with hooks


class Capture:
    """Records indexer picks + scores and router selections for every call, keyed by layer."""

    def __init__(self, model):
        self.model = model
        self.handles = []
        self.reset()
        for name, mod in model.named_modules():
            if ".layers." not in "." + name:
                continue
            layer = int(name.split("layers.")[1].split(".")[0])
            if isinstance(mod, v4.DeepseekV4IndexerScorer):
                self.handles.append(mod.register_forward_hook(self._scorer_hook))
            elif isinstance(mod, v4.DeepseekV4Indexer):
                self.handles.append(mod.register_forward_hook(self._indexer_hook(layer, mod)))
            elif isinstance(mod, v4.DeepseekV4TopKRouter):
                self.handles.append(mod.register_forward_hook(self._router_hook(layer, mod)))
            elif isinstance(mod, v4.DeepseekV4HashRouter):
                self.handles.append(mod.register_forward_hook(self._hash_hook(layer)))

    def reset(self):
        self.indexer = {}  # layer -> list of (positions[S], picks[S,k], scores[S,T])
        self.router = {}  # layer -> list of (ids[S,k] sorted by score desc, selection values[S,E] or None)
        self._last_scores = None

    def close(self):
        for h in self.handles:
            h.remove()

    def _scorer_hook(self, mod, args, out):
        self._last_scores = out.detach().float()[0].clone()

    def _indexer_hook(self, layer, mod):
        def hook(m, args, out):
            positions = args[2][0].clone()
            self.indexer.setdefault(layer, []).append((positions, out[0].clone(), self._last_scores))
        return hook

    def _router_hook(self, layer, mod):
        def hook(m, args, out):
            logits, _, idx = out
            sel = (m.score_fn(logits) + m.e_score_correction_bias).float()
            order = torch.argsort(sel.gather(1, idx), dim=1, descending=True)
            self.router.setdefault(layer, []).append((idx.gather(1, order).clone(), sel.clone()))
        return hook

    def _hash_hook(self, layer):
        def hook(m, args, out):
            self.router.setdefault(layer, []).append((out[2].clone(), None))
        return hook

    def indexer_picks(self):
        return {l: torch.cat([c[1] for c in calls]).tolist() for l, calls in sorted(self.indexer.items())}

    def expert_ids(self):
        return {l: torch.cat([c[0] for c in calls]).tolist() for l, calls in sorted(self.router.items())}


def indexer_gaps(capture, topk, rate):
    """k-th vs (k+1)-th indexer score gap for every query with more than topk valid entries.

    Relative gap = gap / max |score| over that query's valid entries. Also checks HF's pick set.
    """
    worst = {"min_rel_gap": math.inf, "n_queries_checked": 0}
    for layer, calls in capture.indexer.items():
        for positions, picks, scores in calls:
            for s, p in enumerate(positions.tolist()):
                n_valid = (p + 1) // rate
                if n_valid <= topk:
                    continue
                row = scores[s, :n_valid]
                vals, idx = torch.sort(row, descending=True)
                gap = (vals[topk - 1] - vals[topk]).item()
                rel = gap / max(row.abs().max().item(), 1e-30)
                if gap > 0:  # with an exact tie either set is a valid top-k
                    assert set(idx[:topk].tolist()) == set(picks[s].tolist()), (layer, p)
                worst["n_queries_checked"] += 1
                if rel < worst["min_rel_gap"]:
                    worst.update(min_rel_gap=rel, abs_gap=gap, layer=layer, position=p)
    return worst


def router_gaps(capture, k):
    """k-th vs (k+1)-th (score + bias) gap of every score-routed token; relative to max |value|."""
    worst = {"min_rel_gap": math.inf, "n_tokens_checked": 0}
    for layer, calls in capture.router.items():
        for _, sel in calls:
            if sel is None:
                continue
            vals = torch.sort(sel, dim=1, descending=True).values
            rel = (vals[:, k - 1] - vals[:, k]) / vals.abs().max(dim=1).values
            worst["n_tokens_checked"] += rel.numel()
            i = int(torch.argmin(rel))
            if rel[i].item() < worst["min_rel_gap"]:
                worst.update(min_rel_gap=rel[i].item(), abs_gap=(vals[i, k - 1] - vals[i, k]).item(),
                             layer=layer, token=i)
    return worst


def argmax_gaps(logits):
    """Top-1 vs top-2 logit gap per row, relative to the row's max |logit|."""
    top = torch.topk(logits.float(), 2, dim=-1).values
    rel = (top[:, 0] - top[:, 1]) / logits.float().abs().max(dim=-1).values
    i = int(torch.argmin(rel))
    return {"min_rel_gap": rel[i].item(), "row": i}


# ---------------------------------------------------------------------------------------------
# Reference runs


@torch.no_grad()
def full_forward(model, ids):
    out = model(input_ids=torch.tensor([ids]), use_cache=False)
    return out.logits[0]


@torch.no_grad()
def chunked_forward(model, ids, chunks):
    """Run ids in chunks through one DynamicCache; returns the concatenated logits [S, V]."""
    cache = transformers.DynamicCache(config=model.config)
    rows, pos = [], 0
    for n in chunks:
        out = model(input_ids=torch.tensor([ids[pos:pos + n]]), past_key_values=cache, use_cache=True)
        cache = out.past_key_values
        rows.append(out.logits[0])
        pos += n
    assert pos == len(ids)
    return torch.cat(rows)


def decode_schedule(n_tokens):
    done = sum(DECODE_CHUNKS)
    return DECODE_CHUNKS + [1] * (n_tokens - done)


def rel_dev(a, b, ref):
    return ((a.float() - b.float()).abs().max() / ref.float().abs().max()).item()


@torch.no_grad()
def greedy(model, prompt):
    """generate() with min_new_tokens = max_new_tokens, so eos (id 1) can never stop it.

    Returns (ids, raw per-step logits [130, V]); raw logits are before the min-length processor.
    """
    out = model.generate(input_ids=torch.tensor([prompt]), do_sample=False, max_new_tokens=GREEDY_NEW,
                         min_new_tokens=GREEDY_NEW, pad_token_id=model.config.eos_token_id,
                         output_logits=True, return_dict_in_generate=True)
    cont = out.sequences[0, len(prompt):].tolist()
    return cont, torch.cat([l.float() for l in out.logits])


def clamp_stats(model, ids):
    """Fraction of gate values above L and of up values outside [-L, L] (routed + shared experts)."""
    counts = {"gate": [0, 0], "up": [0, 0]}
    orig = v4.DeepseekV4Experts._apply_gate

    def patched(self, gate_up):
        g, u = gate_up.chunk(2, dim=-1)
        counts["gate"][0] += int((g > self.limit).sum()); counts["gate"][1] += g.numel()
        counts["up"][0] += int((u.abs() > self.limit).sum()); counts["up"][1] += u.numel()
        return orig(self, gate_up)

    v4.DeepseekV4Experts._apply_gate = patched
    try:
        full_forward(model, ids)
    finally:
        v4.DeepseekV4Experts._apply_gate = orig
    return {k: c[0] / max(c[1], 1) for k, c in counts.items()}


def analyse(model, prompt, cfg):
    """Full forward with capture, tie margins on the prompt; returns (logits, record)."""
    cap = Capture(model)
    logits = full_forward(model, prompt)
    rec = {
        "indexer_picks": {f"layer_{l}": v for l, v in cap.indexer_picks().items()},
        "expert_ids": {f"layer_{l}": v for l, v in cap.expert_ids().items()},
        "indexer_gap": indexer_gaps(cap, cfg.index_topk, cfg.compress_rates[CSA]),
        "router_gap": router_gaps(cap, cfg.num_experts_per_tok),
    }
    cap.close()
    return logits, rec


def greedy_analysis(model, prompt, cfg):
    """Greedy from the first 20 prompt tokens, then margins on a full forward of the result."""
    prefix = prompt[:GREEDY_PREFIX]
    cont, step_logits = greedy(model, prefix)
    seq = prefix + cont
    cap = Capture(model)
    full = full_forward(model, seq)
    gen_rows = full[GREEDY_PREFIX - 1:-1]
    argmax = gen_rows.argmax(-1).tolist()
    rec = {
        "indexer_gap": indexer_gaps(cap, cfg.index_topk, cfg.compress_rates[CSA]),
        "router_gap": router_gaps(cap, cfg.num_experts_per_tok),
        "argmax_gap": argmax_gaps(gen_rows),
        "steps_where_full_forward_argmax_differs": [i for i, (a, c) in enumerate(zip(argmax, cont)) if a != c],
        "eos_is_raw_argmax_steps": [i for i, a in enumerate(step_logits.argmax(-1).tolist()) if a == 1],
        "generate_vs_full_forward_max_rel_dev": rel_dev(step_logits, gen_rows, gen_rows),
    }
    cap.close()
    return cont, rec


def min_gap(*records):
    return min(r["min_rel_gap"] for r in records)


def versions():
    return {"torch": torch.__version__, "transformers": transformers.__version__, "numpy": np.__version__}


def _dumps(obj, indent=0):
    """JSON with dicts indented and lists of scalars (or of scalar lists, one per line) kept compact."""
    pad = " " * indent
    if isinstance(obj, dict):
        items = [f'{pad} {json.dumps(k)}: {_dumps(v, indent + 1)}' for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}" if items else "{}"
    if isinstance(obj, list) and obj and all(isinstance(x, list) for x in obj) and \
            all(not isinstance(y, (dict, list)) for x in obj for y in x):
        return "[\n" + ",\n".join(pad + "  " + json.dumps(x) for x in obj) + "\n" + pad + "]"
    if isinstance(obj, list) and any(isinstance(x, (dict, list)) for x in obj):
        return "[\n" + ",\n".join(pad + "  " + _dumps(x, indent + 2) for x in obj) + "\n" + pad + "]"
    return json.dumps(obj)


def write_json(path, obj):
    with open(path, "w") as f:
        f.write(_dumps(obj) + "\n")
    with open(path) as f:
        assert json.load(f) == json.loads(json.dumps(obj))


def write_prompt(path, ids):
    with open(path, "w") as f:
        f.write(" ".join(str(i) for i in ids) + "\n")


def config_summary(cfg):
    keys = ["vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "head_dim",
            "partial_rotary_factor", "q_lora_rank", "o_groups", "o_lora_rank", "layer_types",
            "mlp_layer_types", "compress_rates", "sliding_window", "index_n_heads", "index_head_dim",
            "index_topk", "n_routed_experts", "num_experts_per_tok", "moe_intermediate_size",
            "scoring_func", "routed_scaling_factor", "swiglu_limit", "hc_mult", "hc_sinkhorn_iters",
            "hc_eps", "rms_norm_eps", "rope_theta", "compress_rope_theta", "rope_parameters"]
    return {k: getattr(cfg, k) for k in keys}


def load(path, **kw):
    model = DeepseekV4ForCausalLM.from_pretrained(path, **kw)
    model.eval()
    return model
