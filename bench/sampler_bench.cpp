// The host sampler's time per token at the V4 vocabulary (129,280 ids) for the sampling settings requests
// use: what a sequence that does not decode greedily adds to every step (the engine samples each such
// sequence on its loop thread, one after another).
//   sampler_bench [--reps N]
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "runtime/sampler.h"

using namespace di;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
    int reps = 200;
    for (int i = 1; i + 1 < argc; i += 2)
        if (std::strcmp(argv[i], "--reps") == 0) reps = std::stoi(argv[i + 1]);
    const size_t V = 129280;
    // Logits shaped like a language model's: a few likely ids above a broad low tail.
    std::mt19937_64 rng(7);
    std::normal_distribution<float> tail(-2.0f, 2.5f);
    std::vector<std::vector<float>> rows(8, std::vector<float>(V));
    for (auto& r : rows) {
        for (float& x : r) x = tail(rng);
        for (int i = 0; i < 20; ++i) r[rng() % V] = 12.0f + float(i % 7);
    }
    std::vector<int32_t> context(2000);
    for (int32_t& t : context) t = int32_t(rng() % V);
    struct Setting {
        const char* name;
        runtime::SamplingParams p;
    };
    auto params = [](float t, int k, float top_p, float min_p, float rep) {
        runtime::SamplingParams p;
        p.temperature = t, p.top_k = k, p.top_p = top_p, p.min_p = min_p, p.repetition_penalty = rep;
        return p;
    };
    const Setting settings[] = {
        {"temperature 1", params(1.0f, 0, 1.0f, 0.0f, 1.0f)},
        {"temperature 0.7, top-p 0.95", params(0.7f, 0, 0.95f, 0.0f, 1.0f)},
        {"temperature 0.8, top-k 50", params(0.8f, 50, 1.0f, 0.0f, 1.0f)},
        {"temperature 1, min-p 0.05", params(1.0f, 0, 1.0f, 0.05f, 1.0f)},
        {"temperature 0.7, top-p 0.9, repetition 1.1 (2000 ids seen)", params(0.7f, 0, 0.9f, 0.0f, 1.1f)}};
    std::printf("sampler at V = %zu, %d draws each\n", V, reps);
    for (const Setting& s : settings) {
        runtime::Sampler sampler(s.p);
        long sink = 0;
        const Clock::time_point t0 = Clock::now();
        for (int i = 0; i < reps; ++i) sink += sampler.sample(rows[size_t(i) % rows.size()], context, {}).id;
        const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / reps;
        std::printf("  %-60s %8.3f ms/token  (ids sum %ld)\n", s.name, ms, sink);
    }
    return 0;
}
