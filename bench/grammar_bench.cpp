// Structured output cost at the real V4 vocabulary (129,280 ids, assets/tokenizer): the one-time vocabulary
// index, each schema's compilation, and per generated token the mask fill, the sampler's use of the mask and
// the matcher's advance, over the tokens of JSON texts that satisfy the schemas. What a constrained request
// adds to every decode step of its sequence (the step of a V4-Flash decode is milliseconds).
//   grammar_bench [--tokenizer PATH] [--reps N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "deepinfer/tokenizer.h"
#include "runtime/grammar.h"
#include "runtime/sampler.h"

#ifndef DEEPINFER_ASSET_DIR
#define DEEPINFER_ASSET_DIR "assets"
#endif

using namespace di;
using Clock = std::chrono::steady_clock;

namespace {

double ms_since(Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

struct Case {
    const char* name;
    OutputConstraint::Kind kind;
    const char* schema;
    const char* text;  // an output that satisfies it
};

}  // namespace

int main(int argc, char** argv) {
    std::string tok_path = std::string(DEEPINFER_ASSET_DIR) + "/tokenizer";
    int reps = 5;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!std::strcmp(argv[i], "--tokenizer"))
            tok_path = argv[i + 1];
        else if (!std::strcmp(argv[i], "--reps"))
            reps = std::atoi(argv[i + 1]);
    }
    auto tok = Tokenizer::load(tok_path);
    if (!tok) return std::fprintf(stderr, "%s\n", tok.error().message.c_str()), 1;
    const int64_t V = 129280;
    auto t0 = Clock::now();
    runtime::ConstraintCompiler compiler(*tok, V, {tok->eos_id()});
    std::printf("vocabulary index (%lld ids): %.1f ms\n", (long long)V, ms_since(t0));
    const Case cases[] = {
        {"json_object", OutputConstraint::Kind::kJsonObject, "",
         R"({"name": "Ada Lovelace", "born": 1815, "fields": ["mathematics", "computing"], "notes": {"first": true}})"},
        {"json_schema (4 typed fields, enum, nested array)", OutputConstraint::Kind::kJsonSchema,
         R"({"type": "object", "properties": {"city": {"type": "string"}, "temperature": {"type": "number"},
             "unit": {"type": "string", "enum": ["C", "F"]}, "days": {"type": "array", "items": {"type":
             "object", "properties": {"day": {"type": "integer"}, "rain": {"type": "boolean"}}, "required": ["day",
             "rain"]}}}, "required": ["city", "temperature", "unit", "days"], "additionalProperties": false})",
         R"({"city": "Paris", "temperature": 21.5, "unit": "C", "days": [{"day": 1, "rain": false}, {"day": 2, "rain": true}]})"},
    };
    std::vector<float> logits(static_cast<size_t>(V));
    for (int64_t v = 0; v < V; ++v) logits[size_t(v)] = float((v * 2654435761u) % 1000) / 100.0f;
    std::printf(
        "| constraint | compile ms | tokens | mask fill us (mean / max) | sampling with mask us | "
        "sampling without us | accept us |\n|---|---:|---:|---:|---:|---:|---:|\n");
    for (const Case& c : cases) {
        OutputConstraint oc;
        oc.kind = c.kind;
        oc.json_schema = c.schema;
        t0 = Clock::now();
        auto g = compiler.compile(oc);
        const double compile_ms = ms_since(t0);
        if (!g) return std::fprintf(stderr, "%s: %s\n", c.name, g.error().message.c_str()), 1;
        const std::vector<int32_t> ids = tok->encode(c.text, false);
        double fill = 0, fill_max = 0, samp = 0, base = 0, acc = 0;
        int64_t steps = 0;
        std::vector<uint32_t> mask;
        runtime::SamplingParams sp;
        sp.temperature = 0;  // greedy: the mask's own cost, not a sort's
        for (int r = 0; r < reps; ++r) {
            runtime::ConstraintMatcher m(*g, {tok->eos_id()});
            runtime::Sampler s(sp);
            for (int32_t id : ids) {
                auto t = Clock::now();
                m.fill_mask(mask);
                const double f = ms_since(t) * 1e3;
                fill += f, fill_max = std::max(fill_max, f);
                t = Clock::now();
                (void)s.sample(logits, {}, {}, {}, mask);
                samp += ms_since(t) * 1e3;
                t = Clock::now();
                (void)s.sample(logits, {}, {}, {});
                base += ms_since(t) * 1e3;
                t = Clock::now();
                if (!m.accept(id)) return std::fprintf(stderr, "%s: token %d refused\n", c.name, id), 1;
                acc += ms_since(t) * 1e3;
                ++steps;
            }
        }
        std::printf("| %s | %.1f | %zu | %.1f / %.1f | %.1f | %.1f | %.1f |\n", c.name, compile_ms,
                    ids.size(), fill / double(steps), fill_max, samp / double(steps), base / double(steps),
                    acc / double(steps));
    }
    return 0;
}
