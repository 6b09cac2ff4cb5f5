// libFuzzer entry for the admission arithmetic and the scheduler fed with what it admits: limits and
// requests read as raw int64/double from the input (any value, 2^63 - 1 and NaN included), then a random
// sequence of plan (with and without a prefix cache's hooks) / complete / remove / cached memory taken and
// given back, over one to four homes (an expert-parallel model's ranks). Nothing may abort, a granted
// reservation is never negative, and in every home the memory in use plus the cached memory never exceeds
// that home's share of the budget; every running sequence has a home.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>

#include "runtime/admission.h"
#include "runtime/scheduler.h"

namespace {

struct Reader {
    const uint8_t* p;
    size_t n;
    template <class T>
    T take() {
        T v{};
        const size_t k = std::min(sizeof(T), n);
        std::memcpy(&v, p, k);
        p += k, n -= k;
        return v;
    }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace di::runtime;
    Reader r{data, size};
    AdmissionLimits lim;
    lim.max_context = r.take<int64_t>();
    lim.fixed_bytes = std::abs(r.take<int32_t>());
    lim.bytes_per_token = r.take<double>();
    if (!(lim.bytes_per_token >= 0)) lim.bytes_per_token = std::fabs(lim.bytes_per_token);  // NaN stays NaN
    SchedulerConfig cfg;
    cfg.memory_budget_bytes = std::abs(r.take<int64_t>() % (int64_t(1) << 40));
    cfg.max_running = 1 + r.take<uint8_t>() % 64;
    cfg.step_token_budget = 1 + r.take<uint16_t>();
    cfg.prefill_chunk = 1 + r.take<uint16_t>() % 512;
    cfg.max_waiting = 1 + r.take<uint8_t>();
    cfg.homes = 1 + r.take<uint8_t>() % 4;
    Scheduler s(cfg);
    uint64_t id = 0;
    std::map<uint64_t, int64_t> prompts;                // id -> n_prompt
    std::vector<int64_t> cached(size_t(cfg.homes), 0);  // the fake cache's bytes a home, as the scheduler
    AdmissionHooks hooks;                               // must count them
    hooks.reclaim = [&](int64_t need, int home) {
        if (need <= 0 || home < 0 || home >= cfg.homes) std::abort();
        int64_t& c = cached[size_t(home)];
        const int64_t freed = std::min(c, need + int64_t(r.take<uint8_t>()));  // whole entries: more
        c -= freed;
        return freed;
    };
    hooks.defer = [&](uint64_t) { return r.take<uint8_t>() % 4 == 0; };
    hooks.prefilled = [&](uint64_t sid) {
        const int64_t n = prompts.at(sid);
        return int64_t(r.take<uint16_t>()) % ((n - 1) / cfg.prefill_chunk + 1) * cfg.prefill_chunk;
    };
    while (r.n > 0) {
        switch (r.take<uint8_t>() % 6) {
            case 0: {  // a request: prompt length and max_tokens as a client could send them
                const int64_t n_prompt = r.take<int64_t>(), max_tokens = r.take<int64_t>();
                auto bytes = admission_bytes(lim, n_prompt, max_tokens);
                if (!bytes.ok()) break;
                if (*bytes < 0 || n_prompt < 1 || n_prompt > (int64_t(1) << 20)) {
                    if (*bytes < 0) std::abort();
                    break;  // a prompt this long cannot be fed below; the arithmetic was what mattered
                }
                prompts[id] = n_prompt;
                (void)s.add(SeqDemand{id++, n_prompt, *bytes});
                break;
            }
            case 1: {
                const StepPlan p = s.plan();
                s.complete(p);
                break;
            }
            case 2:
                (void)s.remove(r.take<uint8_t>() % (id + 1));
                break;
            case 3: {
                const StepPlan p = s.plan(hooks);
                for (const ScheduledChunk& c : p.chunks)  // a prefill chunk within its prompt, after what
                    if (c.start < 0 || (c.decode ? c.n_tokens != 1  // the cache restored
                                                 : c.n_tokens < 1 || c.start + c.n_tokens > prompts.at(c.id)))
                        std::abort();
                for (const uint64_t a : p.admitted)
                    if (s.home_of(a) < 0 || s.home_of(a) >= cfg.homes) std::abort();
                s.complete(p);
                break;
            }
            case 4: {  // a state kept, or one given back
                const int64_t b = std::abs(r.take<int64_t>() % (int64_t(1) << 40));
                const int home = r.take<uint8_t>() % cfg.homes;
                int64_t& c = cached[size_t(home)];
                if (r.take<uint8_t>() % 2) {
                    if (s.reserve_cached(b, home)) c += b;
                } else {
                    const int64_t back = std::min(b, c);
                    s.release_cached(back, home);
                    c -= back;
                }
                break;
            }
            default:
                (void)state_bytes(lim, r.take<int64_t>());
                break;
        }
        int64_t share_sum = 0;
        for (int h = 0; h < cfg.homes; ++h) {
            const int64_t share =
                cfg.memory_budget_bytes / cfg.homes + (h == 0 ? cfg.memory_budget_bytes % cfg.homes : 0);
            share_sum += share;
            if (s.bytes_in_use(h) < 0 || s.bytes_cached(h) != cached[size_t(h)] ||
                s.bytes_in_use(h) + s.bytes_cached(h) > share || s.unused(h) < 0)
                std::abort();
        }
        if (share_sum != cfg.memory_budget_bytes ||
            s.bytes_in_use() + s.bytes_cached() > cfg.memory_budget_bytes)
            std::abort();
    }
    return 0;
}
