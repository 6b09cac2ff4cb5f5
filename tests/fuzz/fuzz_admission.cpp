// libFuzzer entry for the admission arithmetic and the scheduler fed with what it admits: limits and
// requests read as raw int64/double from the input (any value, 2^63 - 1 and NaN included), then a random
// sequence of plan (with and without a prefix cache's hooks) / complete / remove / cached memory taken and
// given back. Nothing may abort, a granted reservation is never negative, and the memory in use plus the
// cached memory never exceeds the budget.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>

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
    Scheduler s(cfg);
    uint64_t id = 0;
    std::map<uint64_t, int64_t> prompts;  // id -> n_prompt
    int64_t cached = 0;                   // the fake cache's bytes, as the scheduler must count them
    AdmissionHooks hooks;
    hooks.reclaim = [&](int64_t need) {
        if (need <= 0) std::abort();
        const int64_t freed = std::min(cached, need + int64_t(r.take<uint8_t>()));  // whole entries: more
        cached -= freed;
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
                s.complete(p);
                break;
            }
            case 4: {  // a state kept, or one given back
                const int64_t b = std::abs(r.take<int64_t>() % (int64_t(1) << 40));
                if (r.take<uint8_t>() % 2) {
                    if (s.reserve_cached(b)) cached += b;
                } else {
                    const int64_t back = std::min(b, cached);
                    s.release_cached(back);
                    cached -= back;
                }
                break;
            }
            default:
                (void)state_bytes(lim, r.take<int64_t>());
                break;
        }
        if (s.bytes_in_use() < 0 || s.bytes_cached() != cached ||
            s.bytes_in_use() + s.bytes_cached() > cfg.memory_budget_bytes)
            std::abort();
    }
    return 0;
}
