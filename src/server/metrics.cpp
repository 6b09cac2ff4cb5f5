#include "server/metrics.h"

#include <fmt/format.h>

namespace di::server {
namespace {

void header(std::string& out, const char* name, const char* type, const char* help) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

template <typename T>
void metric(std::string& out, const char* name, const char* type, const char* help, T value) {
    header(out, name, type, help);
    out += fmt::format("{} {}\n", name, value);
}

void histogram(std::string& out, const char* name, const char* help, const Histogram& h) {
    header(out, name, "histogram", help);
    uint64_t cum = 0;
    for (size_t i = 0; i < h.bounds.size(); ++i) {
        cum += h.counts[i];
        out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, h.bounds[i], cum);
    }
    cum += h.counts.back();
    out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, cum, name, h.sum, name,
                       h.count);
}

}  // namespace

std::string render_metrics(const EngineStats& s, const ServerCounters& c,
                           const std::vector<KernelUse>& kernels, const ProcessMemory& mem) {
    std::string o;
    metric(o, "deepinfer_requests_submitted_total", "counter", "Requests accepted by the engine.",
           s.requests_submitted);
    metric(o, "deepinfer_requests_rejected_total", "counter", "Requests refused at admission (queue full).",
           s.requests_rejected);
    header(o, "deepinfer_requests_finished_total", "counter", "Finished requests by reason.");
    o += fmt::format("deepinfer_requests_finished_total{{reason=\"stop\"}} {}\n", s.finished_stop);
    o += fmt::format("deepinfer_requests_finished_total{{reason=\"length\"}} {}\n", s.finished_length);
    o += fmt::format("deepinfer_requests_finished_total{{reason=\"cancelled\"}} {}\n", s.finished_cancelled);
    o += fmt::format("deepinfer_requests_finished_total{{reason=\"timeout\"}} {}\n", s.finished_timeout);
    o += fmt::format("deepinfer_requests_finished_total{{reason=\"error\"}} {}\n", s.finished_error);
    metric(o, "deepinfer_prompt_tokens_total", "counter", "Prompt tokens of accepted requests.",
           s.prompt_tokens);
    metric(o, "deepinfer_generation_tokens_total", "counter", "Generated tokens.", s.generation_tokens);
    metric(o, "deepinfer_engine_steps_total", "counter", "Model forward steps.", s.steps);
    metric(o, "deepinfer_engine_greedy_steps_total", "counter",
           "Steps whose every sampling sequence was greedy on raw logits: picked on the model's device, only "
           "ids copied back.",
           s.greedy_steps);
    metric(o, "deepinfer_spec_draft_tokens_total", "counter",
           "Speculative decoding (--speculative mtp): drafted tokens verified by a step.", s.draft_tokens);
    metric(o, "deepinfer_spec_accepted_tokens_total", "counter",
           "Speculative decoding: drafted tokens the model picked too (each a token without a step of its "
           "own).",
           s.draft_tokens_accepted);
    header(o, "deepinfer_sampled_draws_total", "counter",
           "Sampled tokens by where they were drawn from: the row's candidates computed where the logits "
           "are, or "
           "the whole row copied to the host.");
    o += fmt::format("deepinfer_sampled_draws_total{{from=\"candidates\"}} {}\n", s.candidate_draws);
    o += fmt::format("deepinfer_sampled_draws_total{{from=\"row\"}} {}\n", s.full_row_draws);
    histogram(o, "deepinfer_time_to_first_token_seconds", "Time from submission to the first token.",
              s.ttft_seconds);
    histogram(o, "deepinfer_inter_token_latency_seconds", "Time between consecutive tokens of a request.",
              s.itl_seconds);
    histogram(o, "deepinfer_batch_size", "Sequences per engine step.", s.batch_size);
    metric(o, "deepinfer_running_requests", "gauge", "Requests in the running batch.", s.n_running);
    metric(o, "deepinfer_waiting_requests", "gauge", "Requests queued for admission.", s.n_waiting);
    header(o, "deepinfer_state_memory_bytes", "gauge",
           "Sequence state memory: allocated (live states), reserved (admitted requests), prefix_cache (kept "
           "prompt states, given back to admission on demand), free, budget.");
    o += fmt::format("deepinfer_state_memory_bytes{{kind=\"allocated\"}} {}\n", s.state_bytes_allocated);
    o += fmt::format("deepinfer_state_memory_bytes{{kind=\"reserved\"}} {}\n", s.state_bytes_reserved);
    o += fmt::format("deepinfer_state_memory_bytes{{kind=\"prefix_cache\"}} {}\n", s.prefix_cache_bytes);
    o += fmt::format("deepinfer_state_memory_bytes{{kind=\"free\"}} {}\n",
                     s.state_bytes_budget - s.state_bytes_reserved - s.prefix_cache_bytes);
    o += fmt::format("deepinfer_state_memory_bytes{{kind=\"budget\"}} {}\n", s.state_bytes_budget);
    metric(o, "deepinfer_prefix_cache_entries", "gauge", "Prompt states kept by the prefix cache.",
           s.prefix_cache_entries);
    metric(o, "deepinfer_prefix_cache_hits_total", "counter", "Requests started from a kept prompt state.",
           s.prefix_cache_hits);
    metric(o, "deepinfer_prefix_cache_hit_tokens_total", "counter",
           "Prompt tokens restored from the prefix cache instead of prefilled.", s.prefix_cache_hit_tokens);
    metric(o, "deepinfer_prefix_cache_evictions_total", "counter",
           "Kept prompt states dropped for newer ones or for admission.", s.prefix_cache_evictions);
    metric(o, "deepinfer_http_requests_total", "counter", "HTTP requests received.", c.http_requests.load());
    metric(o, "deepinfer_http_errors_total", "counter", "HTTP replies with status >= 400.",
           c.http_errors.load());
    metric(o, "deepinfer_open_streams", "gauge", "Streaming replies in progress.", c.streams_open.load());
    metric(o, "deepinfer_client_disconnects_total", "counter", "Requests cancelled because the client left.",
           c.client_disconnects.load());
    if (mem.resident_bytes >= 0 || mem.heap_in_use_bytes >= 0) {
        header(o, "deepinfer_process_memory_bytes", "gauge",
               "Server process memory: resident set, and heap in use (allocated, not yet freed).");
        if (mem.resident_bytes >= 0)
            o += fmt::format("deepinfer_process_memory_bytes{{kind=\"resident\"}} {}\n", mem.resident_bytes);
        if (mem.heap_in_use_bytes >= 0)
            o += fmt::format("deepinfer_process_memory_bytes{{kind=\"heap_in_use\"}} {}\n",
                             mem.heap_in_use_bytes);
    }
    if (!kernels.empty()) {
        header(
            o, "deepinfer_kernel_dispatches_total", "counter",
            "Calls of each kernel variant; allowed: the active allow-list lets it run (fallbacks always).");
        for (const KernelUse& k : kernels)
            o += fmt::format(
                "deepinfer_kernel_dispatches_total{{op=\"{}\",variant=\"{}\",allowed=\"{}\"}} {}\n", k.op,
                k.variant, k.allowed ? "true" : "false", k.dispatches);
    }
    return o;
}

}  // namespace di::server
