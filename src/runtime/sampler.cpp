#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <unordered_map>

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

    std::vector<double> z(logits.begin(), logits.end());
    if (p_.repetition_penalty != 1.0f) {
        std::vector<bool> seen(V, false);
        for (int32_t t : context) seen[size_t(t)] = true;
        for (size_t v = 0; v < V; ++v)
            if (seen[v]) z[v] = z[v] > 0 ? z[v] / p_.repetition_penalty : z[v] * p_.repetition_penalty;
    }
    if (p_.presence_penalty != 0.0f || p_.frequency_penalty != 0.0f) {
        std::unordered_map<int32_t, int> count;
        for (int32_t t : generated) ++count[t];
        for (auto [t, c] : count) z[size_t(t)] -= p_.presence_penalty + p_.frequency_penalty * c;
    }
    const double neg_inf = -std::numeric_limits<double>::infinity();
    for (int32_t t : suppressed) z[size_t(t)] = neg_inf;
    if (!allowed.empty())
        for (size_t v = 0; v < V; ++v)
            if (!allows(allowed, v)) z[v] = neg_inf;

    if (p_.temperature <= 0.0f) {  // greedy: first maximum, no sort
        out.id = int32_t(std::max_element(z.begin(), z.end()) - z.begin());
    } else {
        std::vector<int32_t> order(V);
        std::iota(order.begin(), order.end(), 0);
        auto better = [&](int32_t a, int32_t b) {
            return z[size_t(a)] > z[size_t(b)] || (z[size_t(a)] == z[size_t(b)] && a < b);
        };
        if (p_.top_k > 0 && size_t(p_.top_k) < V)
            std::partial_sort(order.begin(), order.begin() + p_.top_k, order.end(), better);
        else
            std::sort(order.begin(), order.end(), better);
        size_t keep = V;
        if (p_.top_k > 0) keep = std::min(keep, size_t(p_.top_k));
        while (keep > 1 && z[size_t(order[keep - 1])] == neg_inf) --keep;  // never fall back on a barred id
        std::vector<double> prob(keep);
        const double m = z[size_t(order[0])] / p_.temperature;
        double sum = 0;
        for (size_t i = 0; i < keep; ++i)
            sum += (prob[i] = std::exp(z[size_t(order[i])] / p_.temperature - m));
        for (double& q : prob) q /= sum;
        if (p_.min_p > 0.0f) {  // drop tokens below min_p * p(best)
            size_t k = 1;
            while (k < keep && prob[k] >= p_.min_p * prob[0]) ++k;
            keep = k;
        }
        if (p_.top_p < 1.0f) {  // smallest prefix with mass >= top_p
            double mass = 0;
            size_t k = 0;
            while (k < keep && (k == 0 || mass < p_.top_p)) mass += prob[k++];
            keep = k;
        }
        double total = 0;
        for (size_t i = 0; i < keep; ++i) total += prob[i];
        double r = uniform() * total;
        out.id = order[keep - 1];
        for (size_t i = 0; i < keep; ++i) {
            if (r < prob[i]) {
                out.id = order[i];
                break;
            }
            r -= prob[i];
        }
    }
    finish_logprobs(out, logits);
    return out;
}

// Log-probabilities of the raw distribution: a pass of exp over the vocabulary (~0.5 ms at 129K ids), so only
// when asked for.
void Sampler::finish_logprobs(SampledToken& out, std::span<const float> logits) const {
    if (!p_.logprobs && p_.top_logprobs <= 0) return;
    const size_t V = logits.size();
    const double raw_max = *std::max_element(logits.begin(), logits.end());
    double raw_sum = 0;
    for (float l : logits) raw_sum += std::exp(double(l) - raw_max);
    const double raw_lse = raw_max + std::log(raw_sum);
    out.logprob = float(double(logits[size_t(out.id)]) - raw_lse);
    if (p_.top_logprobs > 0) {
        std::vector<int32_t> raw(V);
        std::iota(raw.begin(), raw.end(), 0);
        const size_t k = std::min(V, size_t(p_.top_logprobs));
        std::partial_sort(raw.begin(), raw.begin() + long(k), raw.end(), [&](int32_t a, int32_t b) {
            return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b);
        });
        for (size_t i = 0; i < k; ++i)
            out.top.emplace_back(raw[i], float(double(logits[size_t(raw[i])]) - raw_lse));
    }
}

}  // namespace di::runtime
