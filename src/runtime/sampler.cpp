#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <unordered_map>

#include "core/check.h"

namespace di::runtime {

Sampler::Sampler(const SamplingParams& p) : p_(p), rng_(p.seed) {}

int64_t first_non_finite(std::span<const float> logits) {
    // Branch-free scan (vectorises): NaN and +-inf are the values with every exponent bit set.
    bool bad = false;
    for (const float l : logits) bad |= !std::isfinite(l);
    if (!bad) return -1;
    for (size_t i = 0; i < logits.size(); ++i)
        if (!std::isfinite(logits[i])) return int64_t(i);
    return -1;
}

namespace {

bool allows(std::span<const uint32_t> mask, size_t v) { return (mask[v / 32] >> (v % 32)) & 1u; }

}  // namespace

double Sampler::uniform() { return double(rng_() >> 11) * 0x1.0p-53; }

namespace {

// Per-thread buffers of the vocabulary's size, reused from draw to draw: fresh ones of a megabyte each cost
// page faults on every token (a third of the draw's time).
struct Scratch {
    std::vector<double> z, e;
    std::vector<int32_t> order;
};
Scratch& scratch() {
    thread_local Scratch s;
    return s;
}

// The ids in descending order of z (ties: the lower id first), sorted only as far as it is read: a draw
// mostly reads the first few dozen of the vocabulary, and a full sort of 129K ids costs milliseconds.
class Ranking {
  public:
    Ranking(const std::vector<double>& z, std::vector<int32_t>& order) : z_(z), order_(order) {
        order_.resize(z.size());
        std::iota(order_.begin(), order_.end(), 0);
    }
    int32_t at(size_t i) {
        if (i >= sorted_) extend(i + 1);
        return order_[i];
    }

  private:
    void extend(size_t need) {
        const size_t c = std::min(order_.size(), std::max({need, 4 * sorted_, size_t(64)}));
        auto better = [this](int32_t a, int32_t b) {
            return z_[size_t(a)] > z_[size_t(b)] || (z_[size_t(a)] == z_[size_t(b)] && a < b);
        };
        const auto from = order_.begin() + long(sorted_), to = order_.begin() + long(c);
        std::partial_sort(from, to, order_.end(), better);  // a heap of c: most ids fail one comparison
        sorted_ = c;
    }
    const std::vector<double>& z_;
    std::vector<int32_t>& order_;
    size_t sorted_ = 0;
};

// Temperature, top-k, min-p and top-p over a ranking, then a draw: the kept ids are a prefix of the ranking,
// each with probability exp(z / T - max / T) / sum, where sum runs over the kept ids before min-p and top-p
// (over the ranking's prefix when top-k cuts, else over every id that is not barred: sum_all(m)). rank(i) is
// the i-th best (id, z), or nullopt where the ranking is not known that far; the draw is then nullopt too.
// total_all(sum): the kept probabilities' total when nothing was cut. n_ok: the ids not barred.
// draft >= 0 (speculative sampling): one uniform keeps the draft with its probability (*kept_draft set), else
// a second draws from the other kept ids in proportion: the result's distribution is the plain draw's.
template <class Rank, class SumAll, class TotalAll, class Uniform>
std::optional<int32_t> draw_ranked(const SamplingParams& p, size_t V, size_t n_ok, Rank&& rank,
                                   SumAll&& sum_all, TotalAll&& total_all, Uniform&& uniform,
                                   int32_t draft = -1, bool* kept_draft = nullptr) {
    if (n_ok == 0) return 0;  // every id barred: id 0, as the greedy path
    const double T = p.temperature;
    size_t keep = p.top_k > 0 ? std::min(V, size_t(p.top_k)) : V;
    keep = std::min(keep, n_ok);  // never fall back on a barred id
    const std::optional<std::pair<int32_t, double>> best = rank(0);
    if (!best) return std::nullopt;
    const double m = best->second / T;
    double sum = 0;
    if (keep < n_ok) {
        for (size_t i = 0; i < keep; ++i) {
            const auto r = rank(i);
            if (!r) return std::nullopt;
            sum += std::exp(r->second / T - m);
        }
    } else {
        sum = sum_all(m);
    }
    auto prob = [&](size_t i) -> std::optional<double> {
        const auto r = rank(i);
        if (!r) return std::nullopt;
        return std::exp(r->second / T - m) / sum;
    };
    const size_t before_cuts = keep;
    if (p.min_p > 0.0f) {  // drop tokens below min_p * p(best)
        const double floor = p.min_p * *prob(0);
        size_t k = 1;
        for (; k < keep; ++k) {
            const auto q = prob(k);
            if (!q) return std::nullopt;
            if (!(*q >= floor)) break;
        }
        keep = k;
    }
    if (p.top_p < 1.0f) {  // smallest prefix with mass >= top_p
        double mass = 0;
        size_t k = 0;
        while (k < keep && (k == 0 || mass < p.top_p)) {
            const auto q = prob(k++);
            if (!q) return std::nullopt;
            mass += *q;
        }
        keep = k;
    }
    double total = 0;
    if (keep == before_cuts && keep == n_ok) {
        total = total_all(sum);
    } else {
        for (size_t i = 0; i < keep; ++i) {
            const auto q = prob(i);
            if (!q) return std::nullopt;
            total += *q;
        }
    }
    size_t skip = keep;  // the draft's place among the kept ids (keep: not kept)
    if (draft >= 0) {
        double q_draft = 0;
        for (size_t i = 0; i < keep && skip == keep; ++i) {
            const auto r = rank(i);
            if (!r) return std::nullopt;
            if (r->first == draft) skip = i, q_draft = *prob(i);
        }
        if (uniform() * total < q_draft || (skip < keep && keep == 1)) {
            *kept_draft = true;
            return draft;
        }
        total -= q_draft;
    }
    double r = uniform() * total;
    std::optional<int32_t> last;
    for (size_t i = 0; i < keep; ++i) {
        if (i == skip) continue;
        const auto q = prob(i);
        if (!q) return std::nullopt;
        last = rank(i)->first;
        if (r < *q) return last;
        r -= *q;
    }
    return last;
}

}  // namespace

// The draw over the whole row: every id ranked on demand, the sums over all of it.
int32_t Sampler::draw(const std::vector<double>& z, int32_t draft, bool* kept_draft) {
    const double neg_inf = -std::numeric_limits<double>::infinity(), T = p_.temperature;
    const size_t V = z.size();
    const size_t n_ok = V - size_t(std::count(z.begin(), z.end(), neg_inf));
    Ranking ranking(z, scratch().order);
    std::vector<double>& e = scratch().e;  // exp(z / T - m) of every id, where the sum runs over all
    const std::optional<int32_t> id = draw_ranked(
        p_, V, n_ok,
        [&](size_t i) -> std::optional<std::pair<int32_t, double>> {
            const int32_t v = ranking.at(i);
            return std::pair{v, z[size_t(v)]};
        },
        [&](double m) {
            double sum = 0;
            e.resize(V);
            for (size_t v = 0; v < V; ++v) sum += e[v] = std::exp(z[v] / T - m);  // exp(-inf) = 0
            return sum;
        },
        [&](double sum) {
            double total = 0;
            for (double x : e) total += x / sum;
            return total;
        },
        [&] { return uniform(); }, draft, kept_draft);
    return *id;  // the whole ranking is known
}

namespace {

// The best ids of a row's ranking, known exactly, with the row's sums over every id.
struct Prefix {
    std::vector<int32_t> ids;
    std::vector<double> z;
    size_t vocab = 0, n_ok = 0;
    double sum_all = 0, total_all = 0;  // sum_v exp(z_v / T - z_0 / T); sum_v of those terms / sum_all
};

}  // namespace

std::vector<int32_t> Sampler::adjusted_ids(std::span<const int32_t> context,
                                           std::span<const int32_t> generated,
                                           std::span<const int32_t> suppressed) const {
    std::vector<int32_t> ids(suppressed.begin(), suppressed.end());
    if (p_.repetition_penalty != 1.0f) ids.insert(ids.end(), context.begin(), context.end());
    if (p_.presence_penalty != 0.0f || p_.frequency_penalty != 0.0f)
        ids.insert(ids.end(), generated.begin(), generated.end());
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    return ids;
}

std::optional<SampledToken> Sampler::sample(const Candidates& c, std::span<const int32_t> context,
                                            std::span<const int32_t> generated,
                                            std::span<const int32_t> suppressed,
                                            std::span<const int32_t> adjusted, std::span<const float> raw) {
    const size_t C = c.ids.size(), V = size_t(c.vocab);
    DI_CHECK(C > 0 && c.logits.size() == C && adjusted.size() == raw.size(),
             "sampling from {} candidates, {} logits, {} adjusted ids with {} logits", C, c.logits.size(),
             adjusted.size(), raw.size());
    if (p_.top_logprobs > 0 && std::min(V, size_t(p_.top_logprobs)) > C) return std::nullopt;
    Prefix p{{}, {}, V, V, c.sum_t, c.total_t};
    if (adjusted.empty()) {  // the candidates as they are: the full row's draw bit for bit
        p.ids.assign(c.ids.begin(), c.ids.end());
        for (const float x : c.logits) p.z.push_back(double(x));
    } else {  // the full row's z on the adjusted ids (sample()'s rules, in its order), the rest as they are
        const double neg_inf = -std::numeric_limits<double>::infinity();
        std::vector<double> za(raw.begin(), raw.end());
        auto at = [&](int32_t id) {
            return size_t(std::lower_bound(adjusted.begin(), adjusted.end(), id) - adjusted.begin());
        };
        if (p_.repetition_penalty != 1.0f) {  // once per id seen, as the full row's mask
            std::vector<bool> seen(adjusted.size(), false);
            for (const int32_t t : context) seen[at(t)] = true;
            for (size_t i = 0; i < za.size(); ++i)
                if (seen[i]) za[i] = repeated(za[i]);
        }
        std::unordered_map<int32_t, int> count;
        if (p_.presence_penalty != 0.0f || p_.frequency_penalty != 0.0f)
            for (const int32_t t : generated) ++count[t];
        for (auto [t, n] : count) za[at(t)] -= occurrence_penalty(n);
        for (const int32_t t : suppressed) za[at(t)] = neg_inf;
        std::vector<std::pair<double, int32_t>> merged;  // (z, id), the known part of the ranking
        for (size_t i = 0; i < C; ++i)
            if (!std::binary_search(adjusted.begin(), adjusted.end(), c.ids[i]))
                merged.emplace_back(double(c.logits[i]), c.ids[i]);
        size_t barred = 0;
        for (size_t i = 0; i < adjusted.size(); ++i)
            if (za[i] == neg_inf)
                ++barred;
            else
                merged.emplace_back(za[i], adjusted[i]);
        auto better = [](const std::pair<double, int32_t>& a, const std::pair<double, int32_t>& b) {
            return a.first > b.first || (a.first == b.first && a.second < b.second);
        };
        std::sort(merged.begin(), merged.end(), better);
        // Ids outside the candidates and not adjusted rank below the last candidate: the ranking is known
        // down to it (all of it when the candidates are the whole row).
        const std::pair<double, int32_t> last{double(c.logits[C - 1]), c.ids[C - 1]};
        for (const auto& e : merged) {
            if (C < V && better(last, e)) break;
            p.ids.push_back(e.second), p.z.push_back(e.first);
        }
        p.n_ok = V - barred;
        if (p_.temperature > 0.0f && !p.ids.empty()) {
            const double T = p_.temperature, m_raw = double(c.logits[0]) / T, m = p.z[0] / T;
            double sum = c.sum_t, added = 0;
            for (size_t i = 0; i < adjusted.size(); ++i) {
                sum -= std::exp(double(raw[i]) / T - m_raw);
                if (za[i] != neg_inf) added += std::exp(za[i] / T - m);
            }
            p.sum_all = sum * std::exp(m_raw - m) + added;
            p.total_all = 1.0;  // the normalised terms' sum, but for rounding
        }
    }
    SampledToken out;
    if (p_.temperature <= 0.0f) {  // the first maximum: the ranking's first
        if (p.ids.empty()) return std::nullopt;
        out.id = p.n_ok == 0 ? 0 : p.ids[0];
    } else {
        const std::mt19937_64 before = rng_;
        const std::optional<int32_t> id = draw_ranked(
            p_, p.vocab, p.n_ok,
            [&](size_t i) -> std::optional<std::pair<int32_t, double>> {
                if (i >= p.ids.size()) return std::nullopt;
                return std::pair{p.ids[i], p.z[i]};
            },
            [&](double) { return p.sum_all; }, [&](double) { return p.total_all; },
            [&] { return uniform(); });
        if (!id) {
            rng_ = before;
            return std::nullopt;
        }
        out.id = *id;
    }
    if (p_.logprobs || p_.top_logprobs > 0) {  // finish_logprobs' sums, the op's in the same order
        const double raw_lse = double(c.logits[0]) + std::log(c.sum_1);
        const auto in_c = std::find(c.ids.begin(), c.ids.end(), out.id);
        float chosen = 0;
        if (in_c != c.ids.end()) {
            chosen = c.logits[size_t(in_c - c.ids.begin())];
        } else {
            const auto in_a = std::lower_bound(adjusted.begin(), adjusted.end(), out.id);
            if (in_a == adjusted.end() || *in_a != out.id) return std::nullopt;  // id 0 of an all-barred row
            chosen = raw[size_t(in_a - adjusted.begin())];
        }
        out.logprob = float(double(chosen) - raw_lse);
        for (size_t i = 0; i < std::min(V, size_t(std::max(p_.top_logprobs, 0))); ++i)
            out.top.emplace_back(c.ids[i], float(double(c.logits[i]) - raw_lse));
    }
    return out;
}

SampledToken Sampler::sample(std::span<const float> logits, std::span<const int32_t> context,
                             std::span<const int32_t> generated, std::span<const int32_t> suppressed,
                             std::span<const uint32_t> allowed) {
    const size_t V = logits.size();
    SampledToken out;
    const bool penalties =
        p_.repetition_penalty != 1.0f || p_.presence_penalty != 0.0f || p_.frequency_penalty != 0.0f;
    if (p_.temperature <= 0.0f && !penalties) {  // greedy on the logits themselves: the first maximum allowed
        std::vector<bool> barred;
        if (!suppressed.empty()) {
            barred.assign(V, false);
            for (int32_t t : suppressed) barred[size_t(t)] = true;
        }
        int64_t best = -1;
        for (size_t v = 0; v < V; ++v) {
            if (!allowed.empty() && !allows(allowed, v)) continue;
            if (!barred.empty() && barred[v]) continue;
            if (best < 0 || logits[v] > logits[size_t(best)]) best = int64_t(v);
        }
        out.id = int32_t(std::max<int64_t>(best, 0));  // nothing allowed: id 0, as the general path
        finish_logprobs(out, logits);
        return out;
    }

    std::vector<double>& z = adjusted_row(logits, context, generated, suppressed, allowed);
    if (p_.temperature <= 0.0f) {  // greedy: first maximum, no sort
        out.id = int32_t(std::max_element(z.begin(), z.end()) - z.begin());
    } else {
        out.id = draw(z);
    }
    finish_logprobs(out, logits);
    return out;
}

std::vector<double>& Sampler::adjusted_row(std::span<const float> logits, std::span<const int32_t> context,
                                           std::span<const int32_t> generated,
                                           std::span<const int32_t> suppressed,
                                           std::span<const uint32_t> allowed) const {
    const size_t V = logits.size();
    std::vector<double>& z = scratch().z;
    z.assign(logits.begin(), logits.end());
    if (p_.repetition_penalty != 1.0f) {
        std::vector<bool> seen(V, false);
        for (int32_t t : context) seen[size_t(t)] = true;
        for (size_t v = 0; v < V; ++v)
            if (seen[v]) z[v] = repeated(z[v]);
    }
    if (p_.presence_penalty != 0.0f || p_.frequency_penalty != 0.0f) {
        std::unordered_map<int32_t, int> count;
        for (int32_t t : generated) ++count[t];
        for (auto [t, c] : count) z[size_t(t)] -= occurrence_penalty(c);
    }
    const double neg_inf = -std::numeric_limits<double>::infinity();
    for (int32_t t : suppressed) z[size_t(t)] = neg_inf;
    if (!allowed.empty())
        for (size_t v = 0; v < V; ++v)
            if (!allows(allowed, v)) z[v] = neg_inf;

    return z;
}

SampledToken Sampler::sample_draft(std::span<const float> logits, int32_t draft, bool& kept,
                                   std::span<const int32_t> context, std::span<const int32_t> generated,
                                   std::span<const int32_t> suppressed, std::span<const uint32_t> allowed) {
    DI_CHECK(p_.temperature > 0.0f && draft >= 0 && size_t(draft) < logits.size(),
             "a draft {} drawn at temperature {}", draft, p_.temperature);
    kept = false;
    SampledToken out;
    out.id = draw(adjusted_row(logits, context, generated, suppressed, allowed), draft, &kept);
    finish_logprobs(out, logits);
    return out;
}

// Log-probabilities of the raw distribution: a pass of exp over the vocabulary (~0.5 ms at 129K ids), so only
// when asked for.
void Sampler::finish_logprobs(SampledToken& out, std::span<const float> logits) const {
    if (!p_.logprobs && p_.top_logprobs <= 0) return;
    out = logprob_of(logits, out.id, p_.top_logprobs);
}

SampledToken logprob_of(std::span<const float> logits, int32_t id, int top) {
    SampledToken out;
    out.id = id;
    const size_t V = logits.size();
    const double raw_max = *std::max_element(logits.begin(), logits.end());
    double raw_sum = 0;
    for (float l : logits) raw_sum += std::exp(double(l) - raw_max);
    const double raw_lse = raw_max + std::log(raw_sum);
    out.logprob = float(double(logits[size_t(id)]) - raw_lse);
    const float mine = logits[size_t(id)];
    out.rank = 1;
    for (size_t v = 0; v < V; ++v) out.rank += logits[v] > mine || (logits[v] == mine && int32_t(v) < id);
    if (top > 0) {
        std::vector<int32_t> raw(V);
        std::iota(raw.begin(), raw.end(), 0);
        const size_t k = std::min(V, size_t(top));
        std::partial_sort(raw.begin(), raw.begin() + long(k), raw.end(), [&](int32_t a, int32_t b) {
            return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b);
        });
        for (size_t i = 0; i < k; ++i)
            out.top.emplace_back(raw[i], float(double(logits[size_t(raw[i])]) - raw_lse));
    }
    return out;
}

}  // namespace di::runtime
