// Speculative decoding's cost and gain (docs/speculative.md) on a random-weight model with the MTP block:
// batch-1 greedy decode one token a step, then the same decode with a draft verified every step (the MTP
// block run after each step, as the engine runs it) at forced acceptance rates. Random weights make the
// block's own guesses nearly always wrong, so the benchmark supplies the drafts: the plain run's next token
// (right) or another one (wrong), right at the rate asked; the tokens must come out as in the plain run
// ("mismatch": first picks unlike the plain run's, plus a million if the token lists differ). "ms/step"
// includes the drafter's share, given apart ("drafter").
//   spec_bench [--preset demo|mid|mid-fullvocab|flash] [--layers L] [--backend cpu|cuda|ref]
//              [--precision exact|native] [--prompt N] [--decode N] [--accept "0 0.5 0.8 0.9"]
//              [--profile 1]  (per-op times of the plain run and of the first speculative one, every op
//                              synchronised: where a speculative step's extra time goes)
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "demo/demo_model.h"
#include "demo/presets.h"
#include "model/model.h"
#include "ops/compare/profile_backend.h"
#include "runtime/backend_factory.h"
#include "runtime/model_loader.h"

using namespace di;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct Run {
    std::vector<int32_t> tokens;  // generated
    double seconds = 0;           // decode steps only (the prompt's step excluded)
    double draft_seconds = 0;     // of which in the MTP block (Model::draft)
    int64_t steps = 0, kept = 0, drafts = 0, mismatches = 0;
};

// Greedy decode of n tokens after `prompt`. accept < 0: one token a step, no drafter. Otherwise each step
// verifies a draft (right at rate `accept`, from `truth`) and the MTP block runs over the kept rows.
Run decode(model::Model& m, const std::vector<int32_t>& prompt, int64_t n, double accept,
           const std::vector<int32_t>& truth) {
    Run r;
    const bool spec = accept >= 0;
    auto st = m.new_state(int64_t(prompt.size()) + n + 2);
    const model::SeqChunk first{st.get(), prompt, false};
    r.tokens.push_back(m.forward_greedy({&first, 1}).ids[0]);
    std::vector<int32_t> next_after_prompt(prompt.begin() + 1, prompt.end());
    next_after_prompt.push_back(r.tokens[0]);
    if (spec) {
        const model::DraftChunk d{next_after_prompt, true};
        m.draft({&d, 1});
    }
    const auto t0 = Clock::now();
    int64_t k = 0;  // drafts so far (the right ones follow a fixed pattern at rate `accept`)
    while (int64_t(r.tokens.size()) < n) {
        const int32_t last = r.tokens.back();
        const bool room = int64_t(r.tokens.size()) + 2 <= n;
        if (!spec || !room) {
            const std::vector<int32_t> feed = {last};
            const model::SeqChunk c{st.get(), feed, false};
            r.tokens.push_back(m.forward_greedy({&c, 1}).ids[0]);
            ++r.steps;
            if (spec) {
                const auto t = Clock::now();
                const model::DraftChunk d{std::span(r.tokens).last(1), true};
                m.draft({&d, 1});
                r.draft_seconds += seconds_since(t);
            }
            continue;
        }
        const size_t at = r.tokens.size();  // the draft guesses truth[at]
        const bool right = std::floor(double(k + 1) * accept) > std::floor(double(k) * accept);
        ++k;
        const int32_t guess = right ? truth[at] : (truth[at] + 1) % int32_t(m.config().vocab_size);
        const std::vector<int32_t> feed = {last, guess};
        st->prepare_undo(1);
        const model::SeqChunk c{st.get(), feed, true};
        const model::GreedyRows g = m.forward_greedy({&c, 1});
        ++r.steps, ++r.drafts;
        r.tokens.push_back(g.ids[0]);
        r.mismatches += g.ids[0] != truth[at] ? 1 : 0;
        const bool hit = g.ids[0] == guess;
        if (hit) r.tokens.push_back(g.ids[1]), ++r.kept;
        st->undo(hit ? 0 : 1);
        const auto t = Clock::now();
        const model::DraftChunk d{std::span(r.tokens).last(hit ? 2 : 1), true};
        m.draft({&d, 1});
        r.draft_seconds += seconds_since(t);
    }
    r.seconds = seconds_since(t0);
    return r;
}

}  // namespace

int main(int argc, char** argv) {
    std::string preset = "demo", backend_name = "cpu", precision = "exact", accepts = "0 0.5 0.8 0.9",
                profile = "0";
    int64_t n_prompt = 64, n_decode = 64, n_layers = 4;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string k = argv[i], v = argv[i + 1];
        if (k == "--preset")
            preset = v;
        else if (k == "--backend")
            backend_name = v;
        else if (k == "--precision")
            precision = v;
        else if (k == "--prompt")
            n_prompt = std::stoll(v);
        else if (k == "--decode")
            n_decode = std::stoll(v);
        else if (k == "--layers")
            n_layers = std::stoll(v);
        else if (k == "--accept")
            accepts = v;
        else if (k == "--profile")
            profile = v;
    }
    demo::RandomModelSpec spec;
    if (preset == "mid-fullvocab") {
        spec = demo::mid_spec();
        spec.vocab = 129280;
    } else if (preset != "demo") {
        auto s = demo::preset_spec(preset, n_layers);
        if (!s) return std::fprintf(stderr, "spec_bench: %s\n", s.error().message.c_str()), 2;
        spec = *s;
    }
    spec.mtp = true;
    auto rm = demo::random_model_in_memory(spec);
    if (!rm) return std::fprintf(stderr, "%s\n", rm.error().message.c_str()), 1;
    auto be = runtime::make_backend(backend_name);
    if (!be) return std::fprintf(stderr, "%s\n", be.error().message.c_str()), 1;
    std::unique_ptr<ops::ProfileBackend> prof;
    if (profile != "0") prof = std::make_unique<ops::ProfileBackend>(**be);
    auto m = runtime::load_model_in_memory(rm->config_json, rm->checkpoint, prof ? *prof : **be, 1, 1);
    *rm = {};
    if (!m) return std::fprintf(stderr, "%s\n", m.error().message.c_str()), 1;
    auto p = runtime::parse_precision(precision);
    if (!p) return std::fprintf(stderr, "%s\n", p.error().message.c_str()), 2;
    (*m)->set_precision(*p);
    std::vector<int32_t> prompt(static_cast<size_t>(n_prompt));
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((i * 7919 + 13) % size_t(spec.vocab));

    decode(**m, prompt, std::min<int64_t>(n_decode, 8), -1, {});  // warm-up
    if (prof) prof->reset();
    const Run plain = decode(**m, prompt, n_decode, -1, {});
    if (prof) {
        fmt::print("plain run, per op:\n{}\n", ops::ProfileBackend::markdown_of(prof->table()));
        prof->reset();
    }
    const double plain_rate = double(plain.steps) / plain.seconds;
    fmt::print(
        "preset {} ({} layers + the MTP block), backend {}, precision {}, prompt {}, {} tokens a run\n",
        preset, (*m)->config().n_layers, backend_name, precision, n_prompt, n_decode);
    fmt::print("{:>10} {:>8} {:>8} {:>10} {:>10} {:>12} {:>9} {:>10}\n", "accept", "steps", "kept", "ms/step",
               "drafter", "tokens/s", "x plain", "mismatch");
    fmt::print("{:>10} {:>8} {:>8} {:>10.2f} {:>10} {:>12.1f} {:>9.2f} {:>10}\n", "plain", plain.steps, 0,
               1e3 * plain.seconds / double(plain.steps), "-", plain_rate, 1.0, 0);
    std::istringstream list(accepts);
    for (double a; list >> a;) {
        const Run r = decode(**m, prompt, n_decode, a, plain.tokens);
        const double generated = double(r.tokens.size() - 1);  // the prompt step's token excluded
        const double rate = generated / r.seconds;
        fmt::print("{:>10.2f} {:>8} {:>8} {:>10.2f} {:>10.2f} {:>12.1f} {:>9.2f} {:>10}\n",
                   double(r.kept) / double(r.drafts), r.steps, r.kept, 1e3 * r.seconds / double(r.steps),
                   1e3 * r.draft_seconds / double(r.steps), rate, rate / plain_rate,
                   r.mismatches + (r.tokens == plain.tokens ? 0 : 1000000));
        if (prof) {
            fmt::print("speculative run, per op:\n{}\n", ops::ProfileBackend::markdown_of(prof->table()));
            prof.reset();  // the rest unprofiled
        }
    }
    return 0;
}
