#!/usr/bin/env python3
"""Goldens of the native precision for v4_tiny_fp8, from transformers 5.17 (CPU, dequantize mode):

  logits_native.npy  the fp32 model with DeepSeek's activation quantisation (act_quant with UE8M0 scales:
                     s = 2^ceil(log2(max(amax, 1e-4) / 448)) per 128 columns, e4m3 round-to-nearest-even
                     after clamping to +-448) applied to the input of every FP8 linear by forward pre-hooks,
                     and to the routed experts' input and SwiGLU output (their FP8 x FP4 GEMMs) by a forward
                     that repeats DeepseekV4Experts' eager loop with the two quantisations added, and with
                     the residual streams kept in bf16 as DeepSeek's inference code keeps them (each decoder
                     layer's two mHC updates computed in fp32 and rounded to bf16, by a forward that repeats
                     DeepseekV4DecoderLayer's): what `--precision native` computes, by an independent
                     implementation of the model.
  logits_bf16.npy    the bf16 model of the same weights (fp32 islands kept, as fixtures_bf16),
                     the reference's own noise floor for this fixture.

    PYTHONPATH=<dir with accelerate> python3 tools/fixtures_native.py [fixture dir] [out dir]
"""
import os
import sys

os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")  # CPU: the FP8 quantizer dequantizes at load
import types  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fixtures_bf16  # noqa: E402
import fixtures_common as fc  # noqa: E402

# HF module names of the checkpoint's FP8 linears (spec 2.1 / the fixture's dtype table).
FP8_LINEARS = ("self_attn.q_a_proj", "self_attn.q_b_proj", "self_attn.kv_proj", "self_attn.o_a_proj",
               "self_attn.o_b_proj", "self_attn.compressor.indexer.q_b_proj", "mlp.shared_experts.gate_proj",
               "mlp.shared_experts.up_proj", "mlp.shared_experts.down_proj")


def pow2_ceil(v):
    m, e = torch.frexp(v)  # v = m * 2^e, m in [0.5, 1): a power of two has m == 0.5
    return torch.ldexp(torch.ones_like(v), torch.where(m == 0.5, e - 1, e))


def act_quant_dequant(x):
    shape = x.shape
    xb = x.float().reshape(*shape[:-1], shape[-1] // 128, 128)
    s = pow2_ceil(xb.abs().amax(-1, keepdim=True).clamp_min(1e-4) / 448.0)
    q = (xb / s).clamp(-448.0, 448.0).to(torch.float8_e4m3fn).float()
    return (q * s).reshape(shape).to(x.dtype)


def quantised_experts_forward(self, hidden_states, top_k_index, top_k_weights):
    """DeepseekV4Experts.forward (transformers 5.17, eager) with the expert GEMMs' inputs quantised."""
    final = torch.zeros_like(hidden_states)
    with torch.no_grad():
        mask = F.one_hot(top_k_index, num_classes=self.num_experts).permute(2, 1, 0)
        hit = torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero()
    for expert_idx in hit:
        expert_idx = expert_idx[0]
        if expert_idx == self.num_experts:
            continue
        top_k_pos, token_idx = torch.where(mask[expert_idx])
        x = act_quant_dequant(hidden_states[token_idx])
        current = self._apply_gate(F.linear(x, self.gate_up_proj[expert_idx]))
        current = F.linear(act_quant_dequant(current), self.down_proj[expert_idx])
        current = current * top_k_weights[token_idx, top_k_pos, None]
        final.index_add_(0, token_idx, current.to(final.dtype))
    return final


def to_bf16_values(x):
    return x.to(torch.bfloat16).to(x.dtype)


def bf16_streams_layer_forward(self, hidden_states, input_ids=None, **kwargs):
    """DeepseekV4DecoderLayer.forward (transformers 5.17) with the streams rounded to bf16 after each of its
    two mHC updates (the update itself in the model's fp32)."""
    dtype = hidden_states.dtype
    hidden_states = to_bf16_values(hidden_states)  # the embedding's copies: bf16 values already
    post, comb, collapsed = self.attn_hc(hidden_states)
    attn_output, _ = self.self_attn(self.input_layernorm(collapsed), **kwargs)
    hidden_states = to_bf16_values(post.to(dtype).unsqueeze(-1) * attn_output.unsqueeze(-2) + torch.matmul(
        comb.to(dtype).transpose(-1, -2), hidden_states))
    post, comb, collapsed = self.ffn_hc(hidden_states)
    mlp_output = self.mlp(self.post_attention_layernorm(collapsed), input_ids=input_ids)
    return to_bf16_values(post.to(dtype).unsqueeze(-1) * mlp_output.unsqueeze(-2) + torch.matmul(
        comb.to(dtype).transpose(-1, -2), hidden_states))


def make_native(model):
    """The model's forward as `--precision native` computes it (the module docstring): hooks and forwards
    replaced in place. Returns (FP8 linears hooked, expert sets, decoder layers)."""
    counts = [0, 0, 0]
    for name, mod in model.named_modules():
        if name.endswith(FP8_LINEARS):
            mod.register_forward_pre_hook(lambda m, args: (act_quant_dequant(args[0]),) + tuple(args[1:]))
            counts[0] += 1
        kind = type(mod).__name__
        if kind == "DeepseekV4Experts":
            mod.forward = types.MethodType(quantised_experts_forward, mod)
            counts[1] += 1
        if kind == "DeepseekV4DecoderLayer":
            mod.forward = types.MethodType(bf16_streams_layer_forward, mod)
            counts[2] += 1
    return tuple(counts)


def bf16_same_weights(model):
    """The bf16 model of exactly these weights: _from_config in bf16, values loaded, the fp32 islands (mHC,
    sinks, position biases, router bias; section 8.2) given back their fp32 values. Every other weight of
    this fixture is exact in bf16 (FP8/FP4 codes times power-of-two scales, BF16 tensors): checked."""
    ref = model.state_dict()
    m = fc.DeepseekV4ForCausalLM._from_config(model.config, dtype=torch.bfloat16).eval()
    m.load_state_dict(ref, strict=True)
    for mod_name, mod in m.named_modules():
        for pname, p in list(mod._parameters.items()):
            full = f"{mod_name}.{pname}" if mod_name else pname
            if p is not None and fixtures_bf16.is_island(full):
                mod._parameters[pname] = torch.nn.Parameter(ref[full].clone().float(), requires_grad=False)
        for bname, b in list(mod._buffers.items()):
            full = f"{mod_name}.{bname}" if mod_name else bname
            if b is not None and b.is_floating_point() and full in ref and fixtures_bf16.is_island(full):
                mod._buffers[bname] = ref[full].clone().float()
    for k, v in m.state_dict().items():
        assert torch.equal(v.float() if v.is_floating_point() else v, ref[k]), k
    return m


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "tests", "data",
                                                           "v4_tiny_fp8")
    out = sys.argv[2] if len(sys.argv) > 2 else d
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    prompt = [int(t) for t in open(os.path.join(d, "prompt.txt")).read().split()]
    model = fc.load(d).float()
    plain = fc.full_forward(model, prompt).numpy()
    want = np.load(os.path.join(d, "logits.npy"))
    print("fp32 run vs logits.npy: max |d| %.3g" % np.abs(plain - want).max(), flush=True)
    bf16 = fc.full_forward(bf16_same_weights(model), prompt).float().numpy()
    hooked, experts, layers = make_native(model)
    native = fc.full_forward(model, prompt).numpy()
    print("hooked %d FP8 linears, %d expert sets, %d layers' streams; native vs fp32: max |d| / max |logit| %.3g" %
          (hooked, experts, layers, np.abs(native - plain).max() / np.abs(plain).max()), flush=True)
    os.makedirs(out, exist_ok=True)
    np.save(os.path.join(out, "logits_native.npy"), native.astype(np.float32))
    np.save(os.path.join(out, "logits_bf16.npy"), bf16.astype(np.float32))


if __name__ == "__main__":
    main()
