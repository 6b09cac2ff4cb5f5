// Speculative decoding's cost and gain (docs/speculative.md) on a random-weight model with the MTP block:
// batch-1 greedy decode one token a step, then the same decode with a draft verified every step (the MTP
// block run after each step, as the engine runs it) at forced acceptance rates. Random weights make the
// block's own guesses nearly always wrong, so the benchmark supplies the drafts: the plain run's next token
// (right) or another one (wrong), right at the rate asked, and the run follows the plain run's tokens, so
// that the rate holds where a verify step's rows round differently from one-token steps (the native
// precision on a GPU: another kernel for two rows, and a near tie of the random model's flat logits then
// picks another token; --rows 1 shows how far). "mismatch": the speculative run's picks unlike the plain
// run's (0 where the kernels give a row the same bits whatever the row count). "ms/step" includes the
// drafter's share, given apart ("drafter").
//   spec_bench [--preset demo|mid|mid-fullvocab|flash] [--layers L] [--backend cpu|cuda|ref]
//              [--precision exact|native] [--prompt N] [--decode N] [--accept "0 0.5 0.8 0.9"]
//              [--profile 1]  (per-op times of the plain run and of the first speculative one, every op
//                              synchronised: where a speculative step's extra time goes)
//              [--compare TOL] (every op also on the reference backend: the first that diverges beyond TOL
//                              relative, then each step's logits as --rows 1 gives them)
//              [--force "op=variant,..."] (the backend's dispatch of those ops forced:
//              Backend::force_variant)
//              [--force-again op=variant] (with --rows: the one-token run again with that op forced, how
//                              far its rows lie from the first run's: the spread of a kernel swap alone)
//              [--rows 1]     (logits to the host every step instead of greedy picks on the device, untimed
//                              use: how far each verify step's first row is from the one-token step's row
//                              at the same position, against that row's gap between its two best logits;
//                              where the pick flips, whether the gap was within the rows' difference)
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "demo/demo_model.h"
#include "demo/presets.h"
#include "model/model.h"
#include "ops/compare/compare_backend.h"
#include "ops/compare/profile_backend.h"
#include "runtime/backend_factory.h"
#include "runtime/model_loader.h"

using namespace di;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

float max_abs_diff(std::span<const float> a, std::span<const float> b) {
    float d = 0;
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
    return d;
}

// Per row r of both: max |a[r] - b[r]|.
std::vector<float> row_diffs(const std::vector<std::vector<float>>& a,
                             const std::vector<std::vector<float>>& b) {
    std::vector<float> d;
    for (size_t r = 0; r < std::min(a.size(), b.size()); ++r) d.push_back(max_abs_diff(a[r], b[r]));
    return d;
}

float median(std::vector<float> v) {
    if (v.empty()) return 0;
    std::nth_element(v.begin(), v.begin() + std::ptrdiff_t(v.size() / 2), v.end());
    return v[v.size() / 2];
}

// The first n values, as " 0.28 0.17 ...".
std::string listed(const std::vector<float>& v, size_t n) {
    std::string s;
    for (size_t i = 0; i < std::min(v.size(), n); ++i) s += fmt::format(" {:.2g}", v[i]);
    return s;
}

// Forces every "op=variant" of a comma-separated list (variant "" with `restore`: the default dispatch);
// false naming the first item the backend does not know.
bool force_variants(ops::Backend& be, const std::string& list, bool restore = false) {
    std::istringstream items(list);
    for (std::string item; std::getline(items, item, ',');) {
        const size_t eq = item.find('=');
        if (eq == std::string::npos ||
            !be.force_variant(item.substr(0, eq), restore ? "" : item.substr(eq + 1))) {
            std::fprintf(stderr, "spec_bench: %s: no such op or variant\n", item.c_str());
            return false;
        }
    }
    return true;
}

struct Run {
    std::vector<int32_t> tokens;  // generated
    double seconds = 0;           // decode steps only (the prompt's step excluded)
    double draft_seconds = 0;     // of which in the MTP block (Model::draft)
    int64_t steps = 0, kept = 0, drafts = 0, mismatches = 0;
    std::vector<std::vector<float>> rows;  // --rows: the one-token run's logits row of each token
    std::vector<float> diffs, gaps;        // --rows: per verify step, max |row 0 - one-token row|, its gap
    int64_t flips = 0, flips_within = 0;   // --rows: first picks unlike the one-token run's; of those, where
                                           // the one-token row's top-2 gap <= twice the diff
};

// The greedy pick of a logits row (the first maximum) and the gap between its two largest logits.
std::pair<int32_t, float> pick_and_gap(std::span<const float> row) {
    int32_t best = 0;
    float first = row[0], second = -INFINITY;
    for (size_t i = 1; i < row.size(); ++i) {
        if (row[i] > first) {
            second = first, first = row[i], best = int32_t(i);
        } else if (row[i] > second) {
            second = row[i];
        }
    }
    return {best, first - second};
}

// One step: the greedy picks of its rows; with `rows`, from logits copied to the host (kept in *logits).
model::GreedyRows step(model::Model& m, const model::SeqChunk& c, bool rows, std::vector<float>* logits) {
    if (!rows) return m.forward_greedy({&c, 1});
    *logits = m.forward({&c, 1});
    const size_t vocab = size_t(m.config().vocab_size);
    model::GreedyRows g;
    for (size_t r = 0; r * vocab < logits->size(); ++r)
        g.ids.push_back(pick_and_gap(std::span(*logits).subspan(r * vocab, vocab)).first);
    return g;
}

// Greedy decode of n tokens after `prompt`. accept < 0: one token a step, no drafter. Otherwise each step
// verifies a draft (right at rate `accept`, from `truth`) and the MTP block runs over the kept rows.
Run decode(model::Model& m, const std::vector<int32_t>& prompt, int64_t n, double accept,
           const std::vector<int32_t>& truth, bool rows = false, const Run* plain = nullptr) {
    Run r;
    std::vector<float> logits;
    const size_t vocab = size_t(m.config().vocab_size);
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
            const int32_t pick = step(m, c, rows, &logits).ids[0];
            if (spec) r.mismatches += pick != truth[r.tokens.size()] ? 1 : 0;
            r.tokens.push_back(spec ? truth[r.tokens.size()] : pick);
            if (rows && !spec) r.rows.push_back(logits);
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
        const model::GreedyRows g = step(m, c, rows, &logits);
        ++r.steps, ++r.drafts;
        r.tokens.push_back(truth[at]);  // the plain run's tokens, whatever this step picks (see the top)
        r.mismatches += g.ids[0] != truth[at] ? 1 : 0;
        if (rows && plain &&
            at - 1 < plain->rows.size()) {  // plain->rows[i]: the row that picked token i + 1
            const std::vector<float>& one = plain->rows[at - 1];
            const float d = max_abs_diff(std::span(logits).first(vocab), one);
            const float gap = pick_and_gap(one).second;
            r.diffs.push_back(d), r.gaps.push_back(gap);
            r.flips += g.ids[0] != truth[at] ? 1 : 0;
            r.flips_within += g.ids[0] != truth[at] && gap <= 2 * d ? 1 : 0;
        }
        const bool hit = right;
        if (hit) {
            r.mismatches += g.ids[1] != truth[at + 1] ? 1 : 0;
            r.tokens.push_back(truth[at + 1]), ++r.kept;
        }
        st->undo(hit ? 0 : 1);
        const auto t = Clock::now();
        const model::DraftChunk d{std::span(r.tokens).last(hit ? 2 : 1), true};
        m.draft({&d, 1});
        r.draft_seconds += seconds_since(t);
    }
    r.seconds = seconds_since(t0);
    return r;
}

// The one-token run's rows again, teacher-forced on `tokens` (the row after token i picks token i + 1): the
// same positions in another precision.
std::vector<std::vector<float>> forced_rows(model::Model& m, const std::vector<int32_t>& prompt,
                                            const std::vector<int32_t>& tokens) {
    auto st = m.new_state(int64_t(prompt.size() + tokens.size()) + 2);
    const model::SeqChunk first{st.get(), prompt, false};
    m.forward({&first, 1});
    std::vector<std::vector<float>> rows;
    for (size_t i = 0; i + 1 < tokens.size(); ++i) {
        const std::vector<int32_t> feed = {tokens[i]};
        const model::SeqChunk c{st.get(), feed, false};
        rows.push_back(m.forward({&c, 1}));
    }
    return rows;
}

}  // namespace

int main(int argc, char** argv) {
    std::string preset = "demo", backend_name = "cpu", precision = "exact", accepts = "0 0.5 0.8 0.9",
                profile = "0", rows_flag = "0";
    double compare_tol = 0;
    std::string force, force_again;
    int64_t n_prompt = 64, n_decode = 64, n_layers = 4;
    CLI::App app("spec_bench: speculative decoding's cost and gain (see the top of bench/spec_bench.cpp)");
    app.add_option("--preset", preset, "demo | mid | mid-fullvocab | flash");
    app.add_option("--backend", backend_name, "cpu | cuda | ref");
    app.add_option("--precision", precision, "exact | native");
    app.add_option("--prompt", n_prompt, "prompt tokens");
    app.add_option("--decode", n_decode, "tokens a run");
    app.add_option("--layers", n_layers, "layers of the preset");
    app.add_option("--accept", accepts, "forced acceptance rates, space-separated");
    app.add_option("--profile", profile, "1: per-op times");
    app.add_option("--rows", rows_flag, "1: verify rows against one-token rows");
    app.add_option("--force", force, "op=variant,... forced");
    app.add_option("--force-again", force_again, "op=variant for the one-token rerun (with --rows)");
    app.add_option("--compare", compare_tol, "relative tolerance: every op against ref");
    CLI11_PARSE(app, argc, argv);
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
    if (!force_variants(**be, force)) return 2;
    std::unique_ptr<ops::ProfileBackend> prof;
    if (profile != "0") prof = std::make_unique<ops::ProfileBackend>(**be);
    std::unique_ptr<ops::CompareBackend> compare;
    if (compare_tol > 0) compare = std::make_unique<ops::CompareBackend>(**be, compare_tol), rows_flag = "1";
    ops::Backend& used = compare ? *compare : prof ? *prof : **be;
    auto m = runtime::load_model_in_memory(rm->config_json, rm->checkpoint, used, 1, 1);
    *rm = {};
    if (!m) return std::fprintf(stderr, "%s\n", m.error().message.c_str()), 1;
    auto p = runtime::parse_precision(precision);
    if (!p) return std::fprintf(stderr, "%s\n", p.error().message.c_str()), 2;
    (*m)->set_precision(*p);
    std::vector<int32_t> prompt(static_cast<size_t>(n_prompt));
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((i * 7919 + 13) % size_t(spec.vocab));

    decode(**m, prompt, std::min<int64_t>(n_decode, 8), -1, {});  // warm-up
    if (prof) prof->reset();
    const bool rows = rows_flag != "0";
    const Run plain = decode(**m, prompt, n_decode, -1, {}, rows);
    if (prof) {
        fmt::print("plain run, per op:\n{}\n", ops::ProfileBackend::markdown_of(prof->table()));
        prof->reset();
    }
    const double plain_rate = double(plain.steps) / plain.seconds;
    if (rows) {  // the noise floor of the verify rows' differences: the other precision on the same positions
        const model::Precision other =
            *p == model::Precision::kNative ? model::Precision::kExact : model::Precision::kNative;
        (*m)->set_precision(other);
        const auto alt = forced_rows(**m, prompt, plain.tokens);
        (*m)->set_precision(*p);
        // --force-again op=variant: the teacher-forced rerun with that op's dispatch forced (another kernel
        // for the same one-token steps: how far a rounding difference carries without any draft)
        if (!force_variants(**be, force_again)) return 2;
        const auto again = forced_rows(**m, prompt, plain.tokens);
        force_variants(**be, force_again, true);
        const std::vector<float> d_other = row_diffs(alt, plain.rows), d_again = row_diffs(again, plain.rows);
        std::vector<float> mag;
        for (const std::vector<float>& row : plain.rows) {
            const auto [lo, hi] = std::minmax_element(row.begin(), row.end());
            mag.push_back(std::max(std::fabs(*lo), std::fabs(*hi)));
        }
        fmt::print(
            "one-token rows: median max |logit| {:.3g}; median max |diff| against the other precision {:.3g} "
            "(in order:{}), against the same run teacher-forced {:.3g} (in order:{})\n",
            median(mag), median(d_other), listed(d_other, 24), median(d_again), listed(d_again, 24));
    }
    fmt::print(
        "preset {} ({} layers + the MTP block), backend {}, precision {}, prompt {}, {} tokens a run\n",
        preset, (*m)->config().n_layers, backend_name, precision, n_prompt, n_decode);
    fmt::print("{:>10} {:>8} {:>8} {:>10} {:>10} {:>12} {:>9} {:>10}\n", "accept", "steps", "kept", "ms/step",
               "drafter", "tokens/s", "x plain", "mismatch");
    fmt::print("{:>10} {:>8} {:>8} {:>10.2f} {:>10} {:>12.1f} {:>9.2f} {:>10}\n", "plain", plain.steps, 0,
               1e3 * plain.seconds / double(plain.steps), "-", plain_rate, 1.0, 0);
    std::istringstream list(accepts);
    for (double a; list >> a;) {
        const Run r = decode(**m, prompt, n_decode, a, plain.tokens, rows, &plain);
        const double generated = double(r.tokens.size() - 1);  // the prompt step's token excluded
        const double rate = generated / r.seconds;
        fmt::print("{:>10.2f} {:>8} {:>8} {:>10.2f} {:>10.2f} {:>12.1f} {:>9.2f} {:>10}\n",
                   double(r.kept) / double(r.drafts), r.steps, r.kept, 1e3 * r.seconds / double(r.steps),
                   1e3 * r.draft_seconds / double(r.steps), rate, rate / plain_rate, r.mismatches);
        if (rows && !r.diffs.empty()) {
            fmt::print("    verify steps' max |diff| in order:{}\n", listed(r.diffs, 12));
            fmt::print(
                "    verify row 0 against the one-token row: max |diff| median {:.3g}, largest {:.3g}; the "
                "one-token row's top-2 gap median {:.3g}, smallest {:.3g}; {} of {} flipped picks had a "
                "gap within twice the diff\n",
                median(r.diffs), *std::max_element(r.diffs.begin(), r.diffs.end()), median(r.gaps),
                *std::min_element(r.gaps.begin(), r.gaps.end()), r.flips_within, r.flips);
        }
        if (prof) {
            fmt::print("speculative run, per op:\n{}\n", ops::ProfileBackend::markdown_of(prof->table()));
            prof.reset();  // the rest unprofiled
        }
    }
    if (compare) {
        fmt::print("compare with ref: {} ops, worst relative difference {:.3g} ({})\n",
                   compare->ops_compared(), compare->worst_relative(), compare->worst_where());
        if (compare->first_divergence())
            fmt::print("first divergent op: {}\n", compare->first_divergence()->describe());
    }
    return 0;
}
