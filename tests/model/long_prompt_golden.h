// The FP8 fixture's 1,100-token prompt in one step against transformers (tools/fixtures_native_long.py keeps
// 165 of its rows): a context 137 times the sliding window for attention and the compressors, and the routed
// experts at a prefill's size (2,200 pairs: what the CUDA backend's W4A8 MoE takes). Exact precision within
// the fp32 bound at every kept row; native held to transformers' own fp8 deviation from fp32, as the
// 60-token GoldenNative test holds it (top-1 within 5% of the rows, max and median within 10%). Shared by
// the cpu test (tests/model) and the cuda one (tests/gpu).
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "io/npy.h"
#include "io/token_list.h"
#include "logits_fidelity.h"
#include "model/model.h"

namespace di::test {

inline void expect_long_prompt_golden(model::Model& m, const std::string& dir, const char* backend) {
    auto prompt = io::read_token_file(dir + "/prompt_long.txt");
    auto kept = io::read_token_file(dir + "/long_rows.txt");
    auto ref_npy = io::read_npy(dir + "/logits_long.npy");
    auto native_npy = io::read_npy(dir + "/logits_long_native.npy");
    auto bf16_npy = io::read_npy(dir + "/logits_long_bf16.npy");
    ASSERT_TRUE(prompt.ok() && kept.ok() && ref_npy.ok() && native_npy.ok() && bf16_npy.ok()) << dir;
    const std::vector<float>& ref = ref_npy->f32;
    const int64_t rows = ref_npy->shape[0], vocab = ref_npy->shape[1];
    ASSERT_EQ(rows, int64_t(kept->size()));
    auto run = [&](model::Precision p) {
        m.set_precision(p);
        const std::unique_ptr<model::SequenceState> st = m.new_state(int64_t(prompt->size()));
        const model::SeqChunk c{st.get(), std::span<const int32_t>(*prompt), true};
        const std::vector<float> all = m.forward(std::span(&c, 1));
        std::vector<float> sel;
        for (const int32_t r : *kept)
            sel.insert(sel.end(), all.begin() + int64_t(r) * vocab, all.begin() + (int64_t(r) + 1) * vocab);
        return sel;
    };
    const Agreement a = compare(run(model::Precision::kExact), ref, rows, vocab);
    EXPECT_EQ(a.argmax_mismatch, 0);
    EXPECT_LE(a.max_diff, 1e-3f * a.max_ref) << "max |d| " << a.max_diff << " max |logit| " << a.max_ref;
    const Fidelity hf_native = fidelity(native_npy->f32, ref, rows, vocab);
    const Fidelity hf_bf16 = fidelity(bf16_npy->f32, ref, rows, vocab);
    const Fidelity got = fidelity(run(model::Precision::kNative), ref, rows, vocab);
    std::printf("long prompt on %s, exact: max |d| / max |logit| %.3g, argmax mismatches %lld\n", backend,
                a.max_diff / a.max_ref, (long long)a.argmax_mismatch);
    const std::string mine = std::string("deepinfer native (") + backend + ") vs transformers fp32";
    for (const auto& [what, x] :
         {std::pair<std::string, Fidelity>{"transformers bf16 vs fp32 (noise floor)", hf_bf16},
          {"transformers fp8 activations vs fp32", hf_native},
          {mine, got}})
        std::printf("long prompt, %-46s top-1 %.4f, min cos %.5f, max rel %.3g, median rel %.3g\n",
                    what.c_str(), x.top1, x.min_cos, x.max_rel, x.median_rel);
    EXPECT_GE(got.top1, hf_native.top1 - 0.05);
    EXPECT_LE(got.max_rel, 1.1 * hf_native.max_rel);
    EXPECT_LE(got.median_rel, 1.1 * hf_native.median_rel);
}

}  // namespace di::test
