// The engine's mechanism: the loop thread asks the Scheduler for a step, allocates state for newly admitted
// requests, runs one model forward over all scheduled chunks, samples and streams tokens, and retires
// finished, cancelled and timed-out requests. Everything shared with submit()/stats() is under `mu`.
#include "deepinfer/engine.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <exception>
#include <filesystem>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "core/check.h"
#include "core/thread_pool.h"
#include "io/mmap_file.h"
#include "ops/elementwise.h"
#include "runtime/admission.h"
#include "runtime/backend_factory.h"
#include "runtime/engine_sequence.h"
#include "runtime/grammar.h"
#include "runtime/kernels_file.h"
#include "runtime/model_loader.h"
#include "runtime/prefix_cache.h"
#include "runtime/scheduler.h"

namespace di {

using runtime::Clock;
using runtime::EngineSequence;

struct Engine::Impl {
    EngineOptions opt;
    std::unique_ptr<ops::Backend> backend;
    std::unique_ptr<model::Model> model;
    std::optional<Tokenizer> tokenizer;
    model::StateSize state_size;
    ModelInfo info;
    std::vector<int32_t> eos_ids;

    mutable std::mutex mu;
    std::condition_variable cv;
    runtime::Scheduler sched;
    std::unordered_map<uint64_t, std::unique_ptr<EngineSequence>> seqs;
    EngineStats st;
    uint64_t next_id = 1;
    bool stopping = false;
    std::mt19937_64 seed_rng{std::random_device{}()};
    std::thread loop;
    std::mutex join_mu;               // shutdown() may be called from several threads
    ops::AllowList allow;             // the kernel variants dispatch may use
    std::once_flag constraints_once;  // the vocabulary index is built on the first constrained request
    std::unique_ptr<runtime::ConstraintCompiler> constraints;
    // Draws the tokens of a step's sampling sequences side by side (each sequence its own sampler and RNG,
    // so the tokens do not depend on the threads): a draw at the V4 vocabulary takes ~0.6 ms.
    std::unique_ptr<ThreadPool> draw_pool;
    // Candidates a row for sampling steps (EngineOptions::sample_candidates; 0: whole rows): 256 answer
    // nearly every draw of a language model's peaked rows (a flat row's wide top-p reads past them and
    // fetches the whole row).
    int64_t sample_candidates = 0;
    static constexpr int64_t kCandidatesPerRow = 256;
    // Prompt states kept at prefill chunk boundaries (EngineOptions::prefix_cache), changed under `mu`; the
    // hits of the plan being started, held (so no eviction frees them) until their states are restored.
    std::optional<runtime::PrefixCache> prefix_cache;
    std::unordered_map<uint64_t, runtime::PrefixCache::Hit> restores;
    std::unordered_set<uint64_t> admitted_now;  // by the plan being made (no state yet)

    runtime::ConstraintCompiler& constraint_compiler() {
        std::call_once(constraints_once, [&] {
            constraints = std::make_unique<runtime::ConstraintCompiler>(
                *tokenizer, info.vocab_size, eos_ids,
                runtime::GrammarLimits{opt.grammar_worker, opt.grammar_timeout, opt.grammar_memory_bytes});
        });
        return *constraints;
    }

    explicit Impl(const runtime::SchedulerConfig& sc) : sched(sc) {}
    runtime::AdmissionLimits limits() const {
        return {info.max_context, model->config().max_position_embeddings, state_size.fixed_bytes,
                state_size.bytes_per_token};
    }
    void run();
    bool step();
    void retire_locked(EngineSequence& s);
    runtime::AdmissionHooks admission_hooks();
    // Whether waiting request `id` should wait for a running one that is prefilling a longer part of its
    // prompt than the cache holds: it then starts from that part's kept state instead of prefilling it too
    // (a burst of requests with one system prompt, n choices of one prompt).
    bool defer_for_shared_prefix(uint64_t id);
    int64_t evict_cached_locked(int64_t need, int home);
    // Speculative decoding, after a step: the drafter runs over every chunk's kept rows (so it follows
    // every sequence) and gives each sampling sequence its guess of the token after the next.
    void draft_next(const runtime::StepPlan& plan, const std::vector<EngineSequence*>& chunk_seqs,
                    const std::vector<int64_t>& kept);
    // After a step: keeps the state of every sequence whose prefill chunk ended where the cache keeps one.
    void keep_prefixes(const runtime::StepPlan& plan, const std::vector<EngineSequence*>& chunk_seqs);
};

namespace {

runtime::SchedulerConfig scheduler_config(const EngineOptions& o) {
    runtime::SchedulerConfig c;
    c.memory_budget_bytes = o.state_memory_bytes;
    c.max_running = o.max_running;
    c.step_token_budget = o.step_token_budget;
    c.prefill_chunk = o.prefill_chunk;
    c.max_waiting = o.max_waiting;
    return c;
}

Status check_options(const EngineOptions& o) {
    if (o.max_running < 1)
        return make_error(ErrorCode::kInvalidArgument, "max_running {} must be >= 1", o.max_running);
    if (o.prefill_chunk < 1)
        return make_error(ErrorCode::kInvalidArgument, "prefill_chunk {} must be >= 1", o.prefill_chunk);
    if (o.step_token_budget < 1)
        return make_error(ErrorCode::kInvalidArgument, "step_token_budget {} must be >= 1",
                          o.step_token_budget);
    if (o.state_memory_bytes < 1)
        return make_error(ErrorCode::kInvalidArgument, "state memory {} bytes must be positive",
                          o.state_memory_bytes);
    if (o.max_context < 0)
        return make_error(ErrorCode::kInvalidArgument, "max_context {} is negative", o.max_context);
    if (o.prefix_cache_max_bytes < 0)
        return make_error(ErrorCode::kInvalidArgument, "prefix_cache_max_bytes {} is negative",
                          o.prefix_cache_max_bytes);
    if (o.sample_candidates < -1 || o.sample_candidates > kMaxSampleCandidates)
        return make_error(ErrorCode::kInvalidArgument, "sample_candidates {} must be in [-1, {}]",
                          o.sample_candidates, kMaxSampleCandidates);
    return ok_status();
}

// 0 in the step options: the backend's defaults (deepinfer/defaults.h).
EngineOptions with_step_defaults(EngineOptions o) {
    const bool cuda = o.backend == "cuda";
    if (o.step_token_budget == 0)
        o.step_token_budget = cuda ? kDefaultStepTokenBudgetCuda : kDefaultStepTokenBudget;
    if (o.prefill_chunk == 0) o.prefill_chunk = cuda ? kDefaultPrefillChunkCuda : kDefaultPrefillChunk;
    return o;
}

}  // namespace

Result<std::unique_ptr<Engine>> Engine::create(const EngineOptions& options) {
    const EngineOptions o = with_step_defaults(options);
    DI_TRY_STATUS(check_options(o));
    auto impl = std::make_unique<Impl>(scheduler_config(o));
    impl->opt = o;
    DI_TRY(impl->backend, runtime::make_backend(o.backend));
    impl->backend->set_graphs(o.graphs);
    impl->allow =
        ops::AllowList::all_of(std::string(impl->backend->name()), impl->backend->kernel_variants());
    if (!o.kernels_file.empty()) {
        DI_TRY(std::string text, io::read_text_file(o.kernels_file));
        DI_TRY(impl->allow, runtime::parse_kernels_file(text, o.kernels_file, *impl->backend));
        impl->backend->set_allow_list(impl->allow);
    }
    DI_TRY(const model::Precision precision, runtime::parse_precision(o.precision));
    DI_TRY(const int draft_tokens, runtime::parse_speculative(o.speculative));
    DI_TRY(impl->model,
           runtime::load_model(o.model_dir, *impl->backend, o.check_weights, o.expert_ranks, draft_tokens));
    impl->model->set_precision(precision);
    runtime::SchedulerConfig sc = scheduler_config(o);  // the state memory split between the model's homes
    sc.homes = impl->model->state_homes();
    impl->sched = runtime::Scheduler(sc);
    const model::ModelConfig& cfg = impl->model->config();
    const std::string tok_path = o.tokenizer_path.empty() ? o.model_dir : o.tokenizer_path;
    const bool has_tok = std::filesystem::exists(std::filesystem::path(tok_path) / "tokenizer.json") ||
                         std::filesystem::is_regular_file(tok_path);
    if (has_tok) {
        DI_TRY(Tokenizer t, Tokenizer::load(tok_path));
        if (t.vocab_size() > cfg.vocab_size)
            return make_error(ErrorCode::kFormat,
                              "tokenizer {} has {} ids, more than the model's vocab_size {}", tok_path,
                              t.vocab_size(), cfg.vocab_size);
        impl->tokenizer.emplace(std::move(t));
    } else if (!o.tokenizer_path.empty()) {
        return make_error(ErrorCode::kNotFound, "tokenizer: no tokenizer.json at {}", o.tokenizer_path);
    }
    for (int64_t e : cfg.eos_token_ids) impl->eos_ids.push_back(int32_t(e));
    if (impl->tokenizer && impl->tokenizer->eos_id() >= 0 &&
        std::find(impl->eos_ids.begin(), impl->eos_ids.end(), impl->tokenizer->eos_id()) ==
            impl->eos_ids.end())
        impl->eos_ids.push_back(impl->tokenizer->eos_id());

    impl->sample_candidates = o.sample_candidates >= 0                        ? o.sample_candidates
                              : impl->model->backend().candidates_on_device() ? Impl::kCandidatesPerRow
                                                                              : 0;
    impl->state_size = impl->model->state_size();
    ModelInfo& mi = impl->info;
    mi.name = std::filesystem::path(o.model_dir).filename().string();
    if (mi.name.empty()) mi.name = std::filesystem::path(o.model_dir).parent_path().filename().string();
    mi.vocab_size = cfg.vocab_size;
    mi.max_context = o.max_context > 0 ? o.max_context : cfg.max_position_embeddings;
    mi.eos_ids = impl->eos_ids;
    mi.state_fixed_bytes = impl->state_size.fixed_bytes;
    mi.state_bytes_per_token = impl->state_size.bytes_per_token;
    impl->st.state_bytes_budget = o.state_memory_bytes;
    if (o.prefix_cache) impl->prefix_cache.emplace(o.prefill_chunk);

    Impl* raw = impl.get();
    impl->loop = std::thread([raw] { raw->run(); });
    return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Engine::~Engine() { shutdown(); }

void Engine::shutdown() {
    {
        std::lock_guard lk(impl_->mu);
        impl_->stopping = true;
    }
    impl_->cv.notify_all();
    std::lock_guard join_lk(impl_->join_mu);
    if (impl_->loop.joinable()) impl_->loop.join();
}

const ModelInfo& Engine::info() const { return impl_->info; }
const Tokenizer* Engine::tokenizer() const { return impl_->tokenizer ? &*impl_->tokenizer : nullptr; }
const EngineOptions& Engine::options() const { return impl_->opt; }

int64_t Engine::state_bytes_for(int64_t capacity) const {
    return runtime::state_bytes(impl_->limits(), capacity);  // model::StateSize::bytes_for, the one formula
}

std::vector<KernelUse> Engine::kernel_uses() const {
    std::lock_guard lk(impl_->mu);  // the loop thread counts dispatches under no lock; reads may lag a step
    std::vector<KernelUse> out;
    for (const ops::KernelVariant& v : impl_->backend->kernel_variants())
        out.push_back({v.op, v.name, v.fallback, impl_->allow.allows(v.op, v.name),
                       impl_->backend->dispatch_count(v.op, v.name)});
    return out;
}

EngineStats Engine::stats() const {
    std::lock_guard lk(impl_->mu);
    EngineStats s = impl_->st;
    s.n_running = impl_->sched.n_running();
    s.n_waiting = impl_->sched.n_waiting();
    s.state_bytes_reserved = impl_->sched.bytes_in_use();
    s.prefix_cache_bytes = impl_->sched.bytes_cached();
    s.prefix_cache_entries = impl_->prefix_cache ? impl_->prefix_cache->size() : 0;
    return s;
}

std::pair<uint64_t, int64_t> Engine::reset_prefix_cache() {
    std::lock_guard lk(impl_->mu);
    if (!impl_->prefix_cache) return {0, 0};
    const size_t before = impl_->prefix_cache->size();
    int64_t freed = 0;
    for (int h = 0; h < impl_->sched.config().homes; ++h) {
        const int64_t home_freed = impl_->evict_cached_locked(INT64_MAX, h);
        impl_->sched.release_cached(home_freed, h);
        freed += home_freed;
    }
    return {uint64_t(before - impl_->prefix_cache->size()), freed};
}

Result<std::shared_ptr<RequestStream>> Engine::submit(Request r) {
    Impl& m = *impl_;
    const int64_t n_prompt = int64_t(r.prompt.size());
    if (r.prompt_logprobs < -1 || r.prompt_logprobs > 20)
        return make_error(ErrorCode::kInvalidArgument, "prompt_logprobs {} must be in [-1, 20]",
                          r.prompt_logprobs);
    // Scoring a prompt (max_tokens 0) reserves a token more than it feeds, within the same limits.
    const bool score_only = r.prompt_logprobs >= 0 && r.stop.max_tokens == 0;
    DI_TRY(const int64_t bytes,
           runtime::admission_bytes(m.limits(), n_prompt, score_only ? 1 : r.stop.max_tokens));
    // An id outside the vocabulary is a bad field, not a context limit: the message starts with the field.
    if (Status s = runtime::check_tokens(r.prompt, m.info.vocab_size); !s.ok())
        return make_error(ErrorCode::kInvalidArgument, "prompt: {}", s.error().message);
    if (!r.stop.stop.empty() && !m.tokenizer)
        return make_error(ErrorCode::kUnsupported, "stop strings need a tokenizer; this model has none");
    if (r.stop.min_tokens < 0 || r.stop.min_tokens > r.stop.max_tokens)
        return make_error(ErrorCode::kInvalidArgument, "min_tokens {} must be in [0, max_tokens = {}]",
                          r.stop.min_tokens, r.stop.max_tokens);
    if (r.sampling.top_logprobs < 0 || r.sampling.top_logprobs > 20)
        return make_error(ErrorCode::kInvalidArgument, "top_logprobs {} must be in [0, 20]",
                          r.sampling.top_logprobs);
    if (Status s = runtime::check_tokens(r.stop.stop_token_ids, m.info.vocab_size); !s.ok())
        return make_error(ErrorCode::kInvalidArgument, "stop_token_ids: {}", s.error().message);
    std::shared_ptr<const runtime::CompiledConstraint> constraint;
    if (r.constraint.kind != OutputConstraint::Kind::kNone) {
        if (!m.tokenizer)
            return make_error(ErrorCode::kInvalidArgument,
                              "response_format: structured output needs a tokenizer; "
                              "this model has none");
        if (r.constraint.after_token >= m.info.vocab_size)
            return make_error(ErrorCode::kInvalidArgument,
                              "response_format: the constraint's start token {} is "
                              "outside the vocabulary",
                              r.constraint.after_token);
        DI_TRY(constraint,
               m.constraint_compiler().compile(r.constraint));  // before the lock: it can take a while
    }

    std::vector<int32_t> stop_ids = r.stop.stop_token_ids;
    if (!r.stop.ignore_eos) stop_ids.insert(stop_ids.end(), m.eos_ids.begin(), m.eos_ids.end());
    const auto timeout = r.timeout.count() > 0 ? r.timeout : m.opt.default_timeout;

    std::unique_lock lk(m.mu);
    if (m.stopping) return make_error(ErrorCode::kUnsupported, "the engine is shutting down");
    if (!r.sampling.seed) r.sampling.seed = m.seed_rng();
    const uint64_t id = m.next_id++;
    if (auto st = m.sched.add(runtime::SeqDemand{id, n_prompt, bytes}); !st) {
        ++m.st.requests_rejected;
        return st.error();
    }
    auto stream = std::make_shared<RequestStream>(id);
    m.seqs.emplace(id, std::make_unique<EngineSequence>(
                           id, std::move(r), stream, m.tokenizer ? &*m.tokenizer : nullptr,
                           std::move(stop_ids), bytes, Clock::now() + timeout, std::move(constraint)));
    ++m.st.requests_submitted;
    m.st.prompt_tokens += uint64_t(n_prompt);
    lk.unlock();
    m.cv.notify_all();
    return stream;
}

void Engine::Impl::retire_locked(EngineSequence& s) {
    switch (s.reason()) {
        case FinishReason::kStop:
            ++st.finished_stop;
            break;
        case FinishReason::kLength:
            ++st.finished_length;
            break;
        case FinishReason::kCancelled:
            ++st.finished_cancelled;
            break;
        case FinishReason::kTimeout:
            ++st.finished_timeout;
            break;
        default:
            ++st.finished_error;
            break;
    }
    st.state_bytes_allocated -= s.state_bytes();
    sched.remove(s.id());
    seqs.erase(s.id());
}

void Engine::Impl::run() {
    for (;;) {
        {
            std::unique_lock lk(mu);
            // Wake at least every 50 ms to notice cancels and deadlines of queued requests.
            cv.wait_for(lk, std::chrono::milliseconds(50), [&] { return stopping || !sched.idle(); });
            if (stopping) break;
        }
        step();
    }
    std::lock_guard lk(mu);
    while (!seqs.empty()) {
        EngineSequence& s = *seqs.begin()->second;
        s.finish(FinishReason::kCancelled, "the engine shut down");
        retire_locked(s);
    }
}

int64_t Engine::Impl::evict_cached_locked(int64_t need, int home) {
    const size_t before = prefix_cache->size();
    const int64_t freed = prefix_cache->evict(need, home);
    st.prefix_cache_evictions += before - prefix_cache->size();
    return freed;
}

runtime::AdmissionHooks Engine::Impl::admission_hooks() {
    runtime::AdmissionHooks h;
    if (!prefix_cache) return h;
    h.reclaim = [this](int64_t need, int home) { return evict_cached_locked(need, home); };
    h.defer = [this](uint64_t id) { return defer_for_shared_prefix(id); };
    h.prefilled = [this](uint64_t id) -> int64_t {
        admitted_now.insert(id);
        const EngineSequence& s = *seqs.at(id);
        if (s.prompt_logprobs() >= 0) return int64_t(0);  // it needs every prompt row's logits
        std::optional<runtime::PrefixCache::Hit> hit = prefix_cache->lookup(s.prompt(), s.cache_salt());
        if (!hit) return 0;
        const int64_t n = hit->n_tokens;
        restores.emplace(id, std::move(*hit));
        return n;
    };
    return h;
}

bool Engine::Impl::defer_for_shared_prefix(uint64_t id) {
    EngineSequence& h = *seqs.at(id);
    if (h.prompt_logprobs() >= 0) return false;
    auto keys = [&](EngineSequence& s) -> const std::vector<uint64_t>& {
        if (s.prefix_keys().empty())
            s.prefix_keys() = prefix_cache->boundary_keys(s.prompt(), s.cache_salt());
        return s.prefix_keys();
    };
    const std::vector<uint64_t>& hk = keys(h);
    if (hk.empty()) return false;
    int64_t hit = -1;  // computed once a running prompt shares a chunk
    for (auto& [rid, rs] : seqs) {
        EngineSequence& r = *rs;
        const bool running = r.state() != nullptr || admitted_now.count(rid);
        if (rid == id || !running || r.finished()) continue;
        const std::vector<uint64_t>& rk = keys(r);
        if (rk.empty() || rk[0] != hk[0]) continue;
        size_t shared = 0;
        while (shared < hk.size() && shared < rk.size() && hk[shared] == rk[shared]) ++shared;
        const int64_t target =
            prefix_cache->kept_at_most(int64_t(shared) * prefix_cache->chunk(), r.n_prompt());
        const auto restored = restores.find(rid);
        const int64_t fed = r.state()                    ? r.state()->n_tokens()
                            : restored != restores.end() ? restored->second.n_tokens
                                                         : 0;
        if (target <= fed) continue;  // kept already, or never will be
        if (hit < 0) hit = prefix_cache->cached_length(hk);
        if (target > hit) return true;
    }
    return false;
}

void Engine::Impl::keep_prefixes(const runtime::StepPlan& plan,
                                 const std::vector<EngineSequence*>& chunk_seqs) {
    for (size_t i = 0; i < plan.chunks.size(); ++i) {
        const runtime::ScheduledChunk& c = plan.chunks[i];
        EngineSequence& s = *chunk_seqs[i];
        const int64_t at = c.start + c.n_tokens;
        if (c.decode || !prefix_cache->keeps(at, s.n_prompt())) continue;
        const std::span<const int32_t> prefix = s.prompt().first(size_t(at));
        const int64_t bytes = runtime::state_bytes(limits(), at);
        int home = 0;
        {
            // Room from memory no sequence reserves, older entries of the same home giving way to it: the
            // home with the most such room (the cache's cap counts all homes together).
            std::lock_guard lk(mu);
            if (prefix_cache->contains(prefix, s.cache_salt())) continue;
            for (int h = 1; h < sched.config().homes; ++h)
                if (sched.unused(h) + sched.bytes_cached(h) > sched.unused(home) + sched.bytes_cached(home))
                    home = h;
            int64_t unused = sched.unused(home);
            if (const int64_t cap = opt.prefix_cache_max_bytes; cap > 0)
                unused = std::min(unused, cap - sched.bytes_cached());
            if (bytes > unused + sched.bytes_cached(home)) continue;
            if (bytes > unused) sched.release_cached(evict_cached_locked(bytes - unused, home), home);
            if (!sched.reserve_cached(bytes, home)) continue;
        }
        DI_CHECK(s.state()->n_tokens() == at, "request {}: state holds {} tokens, kept at {}", s.id(),
                 s.state()->n_tokens(), at);
        std::unique_ptr<model::SequenceState> copy = model->new_state_on(at, home);
        DI_CHECK(copy->bytes() <= bytes && copy->copy_from(*s.state()),
                 "request {}: its state could not be kept for the prefix cache", s.id());
        std::lock_guard lk(mu);
        prefix_cache->insert(prefix, std::move(copy), bytes, s.cache_salt(), home);
    }
}

void Engine::Impl::draft_next(const runtime::StepPlan& plan, const std::vector<EngineSequence*>& chunk_seqs,
                              const std::vector<int64_t>& kept) {
    std::vector<model::DraftChunk> jobs(plan.chunks.size());
    for (size_t i = 0; i < plan.chunks.size(); ++i) {
        EngineSequence& q = *chunk_seqs[i];
        q.set_draft(-1);
        if (q.finished()) continue;  // its state is not read again
        // the tokens after the kept rows: the prompt's, or the ones just chosen; the drafter runs over them
        // whether or not it guesses (its window follows every sequence), the guess costs the head again
        jobs[i] = {q.tokens(plan.chunks[i].start + 1, kept[i]),
                   plan.chunks[i].samples && q.may_verify() && q.wants_draft()};
    }
    const std::vector<int32_t> guesses = model->draft(jobs);
    DI_CHECK(guesses.size() == jobs.size(), "draft returned {} guesses for {} chunks", guesses.size(),
             jobs.size());
    for (size_t i = 0; i < jobs.size(); ++i)
        if (jobs[i].want) chunk_seqs[i]->set_draft(guesses[i]);
}

// One engine step; returns false when there was nothing to run.
bool Engine::Impl::step() {
    runtime::StepPlan plan;
    std::vector<EngineSequence*> chunk_seqs, admitted;
    std::vector<int> homes;  // of the admitted
    {
        std::lock_guard lk(mu);
        const Clock::time_point now = Clock::now();
        std::vector<EngineSequence*> done;
        for (auto& [id, s] : seqs) {
            if (s->stream().cancel_requested())
                s->finish(FinishReason::kCancelled, "cancelled");
            else if (now > s->deadline())
                s->finish(FinishReason::kTimeout, "the request timed out");
            if (s->finished()) done.push_back(s.get());
        }
        for (EngineSequence* s : done) retire_locked(*s);
        admitted_now.clear();
        plan = sched.plan(admission_hooks());
        if (plan.empty()) return false;
        for (uint64_t id : plan.admitted) {
            admitted.push_back(seqs.at(id).get());
            homes.push_back(sched.home_of(id));
        }
        for (const auto& c : plan.chunks) chunk_seqs.push_back(seqs.at(c.id).get());
    }
    // State allocation happens outside the lock: submit() and stats() never wait for it.
    int64_t allocated = 0, hit_tokens = 0;
    for (size_t i = 0; i < admitted.size(); ++i) {
        EngineSequence* s = admitted[i];
        s->set_state(model->new_state_on(s->capacity(), homes[i]));
        DI_CHECK(s->state_bytes() <= s->reserved_bytes(), "request {}: state {} bytes, reserved {}", s->id(),
                 s->state_bytes(), s->reserved_bytes());
        allocated += s->state_bytes();
        if (const auto r = restores.find(s->id()); r != restores.end()) {
            DI_CHECK(s->state()->copy_from(*r->second.state),
                     "request {}: the prefix cache's state does not fit its state", s->id());
            s->set_cached_tokens(r->second.n_tokens);
            hit_tokens += r->second.n_tokens;
        }
    }
    const size_t hits = restores.size();
    restores.clear();
    if (allocated > 0) {  // visible in stats() before the first token of these requests is
        std::lock_guard lk(mu);
        st.state_bytes_allocated += allocated;
        st.prefix_cache_hits += hits;
        st.prefix_cache_hit_tokens += uint64_t(hit_tokens);
    }
    std::vector<model::SeqChunk> chunks;
    chunks.reserve(plan.chunks.size());
    // A prefill chunk whose request asks for its prompt's logprobs gives every row's logits; the step then
    // brings every row to the host (the whole-row path below).
    bool all_rows = false;
    for (size_t i = 0; i < plan.chunks.size(); ++i) {
        const auto& c = plan.chunks[i];
        const bool rows = !c.decode && chunk_seqs[i]->prompt_logprobs() >= 0;
        all_rows = all_rows || rows;
        chunks.push_back(
            model::SeqChunk{chunk_seqs[i]->state(), chunk_seqs[i]->tokens(c.start, c.n_tokens), rows});
    }
    // Speculative decoding (docs/speculative.md): a decoding sequence with a draft to verify feeds it after
    // its token; both rows' picks or logits decide (EngineSequence::settle_picks / settle_draws). kept[i]:
    // the rows of chunk i its state keeps (a draft not kept is taken back).
    std::vector<std::array<int32_t, 2>> spec_tokens(plan.chunks.size());
    std::vector<char> spec(plan.chunks.size(), 0);
    std::vector<int64_t> kept(plan.chunks.size());
    for (size_t i = 0; i < plan.chunks.size(); ++i) {
        kept[i] = plan.chunks[i].n_tokens;
        EngineSequence& q = *chunk_seqs[i];
        if (!plan.chunks[i].decode || !q.verifies_draft()) continue;
        spec[i] = 1;
        spec_tokens[i] = {chunks[i].tokens[0], q.draft()};
        chunks[i].tokens = spec_tokens[i];
        chunks[i].all_logits = true;
        q.state()->prepare_undo(1);
    }
    std::vector<size_t> row_end;  // one past chunk i's last logits row
    for (size_t i = 0; i < chunks.size(); ++i)
        row_end.push_back((row_end.empty() ? 0 : row_end.back()) +
                          (chunks[i].all_logits ? chunks[i].tokens.size() : 1));
    uint64_t proposed = 0, accepted = 0;
    auto verified = [&](size_t i, bool kept_draft) {  // EngineSequence::settle_*'s outcome
        kept[i] = kept_draft ? 2 : 1;
        ++proposed;
        accepted += kept_draft ? 1 : 0;
    };
    using Pick = EngineSequence::Pick;
    // Sampling and detokenising run outside the lock too; only the loop thread touches sequences. When
    // every sequence that samples this step takes the first maximum of its raw logits, the model picks
    // them where the logits are and only ids come back.
    EngineSequence::StepMetrics sm;
    size_t candidate_rows = 0, full_rows = 0;  // sampled rows drawn from candidates / whole rows
    bool greedy = !all_rows;
    for (size_t i = 0; i < plan.chunks.size(); ++i)
        if (plan.chunks[i].samples) greedy = greedy && chunk_seqs[i]->greedy_pick();
    if (greedy) {
        const model::GreedyRows picks = model->forward_greedy(chunks);
        DI_CHECK(picks.ids.size() == row_end.back() && picks.bad.size() == row_end.back() &&
                     picks.bad_value.size() == row_end.back(),
                 "forward_greedy returned {} picks for {} rows", picks.ids.size(), row_end.back());
        auto at = [&](size_t r) { return Pick{picks.ids[r], picks.bad[r], picks.bad_value[r]}; };
        for (size_t i = 0; i < plan.chunks.size(); ++i) {
            const size_t r = row_end[i] - 1;
            if (spec[i])
                verified(i, chunk_seqs[i]->settle_picks(at(r - 1), at(r), sm));
            else if (plan.chunks[i].samples)
                chunk_seqs[i]->on_greedy_pick(picks.ids[r], picks.bad[r], picks.bad_value[r], sm);
        }
    } else {
        std::vector<size_t> sampling;  // the chunks that draw (speculative chunks settle their drafts apart)
        std::vector<size_t> spec_drawn;  // speculative chunks of drawing sequences: their two rows whole
        std::vector<char> drawn(plan.chunks.size(), 0);
        for (size_t i = 0; i < plan.chunks.size(); ++i) {
            if (spec[i] && !chunk_seqs[i]->greedy_pick())
                spec_drawn.push_back(i), drawn[i] = 1;
            else if (plan.chunks[i].samples && !spec[i])
                sampling.push_back(i);
        }
        std::vector<EngineSequence::Draw> draws(sampling.size());
        std::vector<size_t> full;   // the draws (indices into sampling) that take the whole logits row
        std::vector<float> logits;  // rows: those draws' rows in that order (candidates), or every row
        const int64_t vocab = model->config().vocab_size;
        const bool from_candidates = sample_candidates > 0 && !all_rows;
        if (from_candidates) {
            // candidates where the logits are; a whole row only where a draw needs it
            std::vector<float> temperatures(row_end.back(), 0.0f);
            for (size_t i : sampling) temperatures[row_end[i] - 1] = chunk_seqs[i]->temperature();
            const model::CandidateRows cr =
                model->forward_candidates(chunks, temperatures, sample_candidates);
            const size_t C = size_t(cr.per_row);
            DI_CHECK(cr.ids.size() == row_end.back() * C && cr.bad.size() == row_end.back(),
                     "forward_candidates returned {} candidates for {} rows", cr.ids.size(), row_end.back());
            // the logits penalties and held-back stop ids change, fetched for every such row at once
            std::vector<std::optional<std::vector<int32_t>>> extras(sampling.size());
            std::vector<int64_t> at_rows;
            std::vector<int32_t> at_ids;
            for (size_t j = 0; j < sampling.size(); ++j) {
                extras[j] = chunk_seqs[sampling[j]]->candidate_extras();
                if (extras[j])
                    for (const int32_t id : *extras[j])
                        at_rows.push_back(int64_t(row_end[sampling[j]] - 1)), at_ids.push_back(id);
            }
            const std::vector<float> at_raw =
                at_ids.empty() ? std::vector<float>{} : model->step_logits_at(at_rows, at_ids);
            size_t next = 0;
            for (size_t j = 0; j < sampling.size(); ++j) {
                const size_t i = sampling[j], r = row_end[i] - 1;
                std::optional<EngineSequence::Draw> d;
                if (extras[j]) {
                    const runtime::Candidates c{std::span(cr.ids).subspan(r * C, C),
                                                std::span(cr.logits).subspan(r * C, C),
                                                cr.sums[3 * r],
                                                cr.sums[3 * r + 1],
                                                cr.sums[3 * r + 2],
                                                vocab};
                    const size_t n = extras[j]->size();
                    d = chunk_seqs[i]->draw(c, cr.bad[r], *extras[j], std::span(at_raw).subspan(next, n));
                    next += n;
                }
                if (d)
                    draws[j] = std::move(*d);
                else
                    full.push_back(j);
            }
            // a greedy speculative chunk's picks: its rows' first candidates (the first maximum: candidates
            // are by logit descending, id ascending); a drawing one's draws from its two rows, whole
            std::vector<int64_t> drawn_rows;
            for (size_t i : spec_drawn)
                drawn_rows.insert(drawn_rows.end(), {int64_t(row_end[i] - 2), int64_t(row_end[i] - 1)});
            if (!drawn_rows.empty()) {
                const std::vector<float> two = model->step_logits_rows(drawn_rows);
                for (size_t k = 0; k < spec_drawn.size(); ++k)
                    verified(spec_drawn[k],
                             chunk_seqs[spec_drawn[k]]->settle_draws(
                                 std::span(two).subspan(2 * k * size_t(vocab), size_t(vocab)),
                                 std::span(two).subspan((2 * k + 1) * size_t(vocab), size_t(vocab)), sm));
            }
            for (size_t i = 0; i < plan.chunks.size(); ++i) {
                if (!spec[i] || drawn[i]) continue;
                const size_t r = row_end[i] - 1;
                auto pick = [&](size_t row) {
                    Pick p{cr.ids[row * C], cr.bad[row], 0};
                    if (p.bad >= 0)  // its value for the message
                        p.bad_value = model->step_logits_at(std::vector<int64_t>{int64_t(row)},
                                                            std::vector<int32_t>{p.bad})[0];
                    return p;
                };
                verified(i, chunk_seqs[i]->settle_picks(pick(r - 1), pick(r), sm));
            }
            std::vector<int64_t> rows;
            for (size_t j : full) rows.push_back(int64_t(row_end[sampling[j]] - 1));
            if (!rows.empty()) logits = model->step_logits_rows(rows);
        } else {
            logits = model->forward(chunks);
            DI_CHECK(logits.size() == row_end.back() * size_t(vocab),
                     "forward returned {} logits for {} rows", logits.size(), row_end.back());
            for (size_t j = 0; j < sampling.size(); ++j) full.push_back(j);
            const std::span<const float> all(logits);
            auto row = [&](size_t k) { return all.subspan(k * size_t(vocab), size_t(vocab)); };
            auto pick = [&](size_t k) {
                const auto [id, bad] = ops::argmax_row(row(k).data(), vocab);
                return Pick{id, bad, bad < 0 ? 0.0f : row(k)[size_t(bad)]};
            };
            for (size_t i = 0; i < chunks.size(); ++i) {  // before the tokens drawn from their last rows
                const size_t r = row_end[i] - 1;
                if (drawn[i]) {
                    verified(i, chunk_seqs[i]->settle_draws(row(r - 1), row(r), sm));
                } else if (spec[i]) {
                    verified(i, chunk_seqs[i]->settle_picks(pick(r - 1), pick(r), sm));
                } else if (chunks[i].all_logits) {
                    const size_t r0 = row_end[i] - chunks[i].tokens.size();
                    const int64_t n = int64_t(chunks[i].tokens.size());
                    chunk_seqs[i]->on_prompt_logits(
                        plan.chunks[i].start, n, all.subspan(r0 * size_t(vocab), size_t(n) * size_t(vocab)));
                }
            }
        }
        // The whole-row draws, on several threads (each sequence advances only its own sampler).
        std::vector<std::exception_ptr> failed(full.size());  // rethrown here, on the loop thread
        auto draw = [&](int64_t b, int64_t e, int) {
            for (int64_t f = b; f < e; ++f) {
                const size_t j = full[size_t(f)], i = sampling[j];
                const size_t row = from_candidates ? size_t(f) : row_end[i] - 1;
                try {
                    draws[j] = chunk_seqs[i]->draw(
                        std::span<const float>(logits).subspan(row * size_t(vocab), size_t(vocab)));
                } catch (...) {
                    failed[size_t(f)] = std::current_exception();
                }
            }
        };
        if (full.size() > 1) {
            if (!draw_pool)
                draw_pool = std::make_unique<ThreadPool>(std::min(ThreadPool::default_threads(), 16));
            draw_pool->parallel_for(int64_t(full.size()), 1, draw);
        } else {
            draw(0, int64_t(full.size()), 0);
        }
        for (const std::exception_ptr& f : failed)
            if (f) std::rethrow_exception(f);
        for (size_t j = 0; j < sampling.size(); ++j) chunk_seqs[sampling[j]]->on_draw(draws[j], sm);
        full_rows = full.size();
        candidate_rows = sampling.size() - full.size();
    }
    if (model->draft_tokens() > 0) draft_next(plan, chunk_seqs, kept);
    if (prefix_cache) keep_prefixes(plan, chunk_seqs);

    std::lock_guard lk(mu);
    ++st.steps;
    st.draft_tokens += proposed;
    st.draft_tokens_accepted += accepted;
    if (greedy) ++st.greedy_steps;
    st.candidate_draws += candidate_rows;
    st.full_row_draws += full_rows;
    st.generation_tokens += sm.generated;
    for (double v : sm.ttft) st.ttft_seconds.observe(v);
    for (double v : sm.itl) st.itl_seconds.observe(v);
    st.batch_size.observe(double(plan.chunks.size()));
    sched.complete(plan);
    for (size_t i = 0; i < plan.chunks.size(); ++i)  // an accepted draft: a token more in the state
        if (kept[i] > plan.chunks[i].n_tokens)
            sched.fed_more(plan.chunks[i].id, kept[i] - plan.chunks[i].n_tokens);
    for (EngineSequence* s : chunk_seqs)
        if (s->finished() && seqs.count(s->id())) retire_locked(*s);
    return true;
}

}  // namespace di
