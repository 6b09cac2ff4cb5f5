// deepinfer serve: the OpenAI-compatible HTTP server over the continuous-batching engine. Without --model
// it serves the embedded demo model. Stops cleanly on SIGINT/SIGTERM.
#include <fmt/format.h>
#include <pthread.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "cli/command.h"
#include "cli/generate_common.h"
#include "deepinfer/engine.h"
#include "demo/demo_model.h"
#include "runtime/backend_factory.h"
#include "server/http_server.h"

namespace di::cli {
namespace {

struct ServeOptions {
    EngineOptions engine;
    server::ServerOptions server;
    int64_t state_memory_mib = 2048;
    double request_timeout_s = 600;
    int64_t max_body_bytes = int64_t(1) << 20;
    std::string log_level = "info";
    double grammar_timeout_s = 20;
    int64_t grammar_memory_mib = 4096;
};

// This program's own path, for the grammar compiler's helper process; "" where it cannot be read (then no
// helper: schemas compile unbounded, as for embedders).
std::string own_executable() {
    std::error_code ec;
    const std::filesystem::path p = std::filesystem::read_symlink("/proc/self/exe", ec);
    return ec ? std::string() : p.string();
}

int run_serve(ServeOptions o) {
    // Every option checked here, before anything starts: written as "inside the range" so NaN fails too.
    if (!(o.state_memory_mib > 0 && o.state_memory_mib <= (int64_t(1) << 30)))
        return fail(fmt::format("--state-memory-mib {} must be in [1, 2^30]", o.state_memory_mib));
    if (!(o.request_timeout_s > 0 && o.request_timeout_s <= 1e7))
        return fail(
            fmt::format("--request-timeout {} must be a number of seconds in (0, 1e7]", o.request_timeout_s));
    if (!(o.max_body_bytes >= 64 && o.max_body_bytes <= (int64_t(1) << 32)))
        return fail(fmt::format("--max-body-bytes {} must be in [64, 2^32]", o.max_body_bytes));
    o.server.max_body_bytes = size_t(o.max_body_bytes);
    const auto level = server::parse_log_level(o.log_level);
    if (!level) return fail(fmt::format("--log-level '{}' must be error, warn, info or debug", o.log_level));
    o.server.log_level = *level;
    for (const auto& [name, v] : {std::pair{"--read-timeout", o.server.read_timeout_s},
                                  std::pair{"--write-timeout", o.server.write_timeout_s}})
        if (v < 1 || v > 86400) return fail(fmt::format("{} {} must be in [1, 86400] seconds", name, v));
    if (o.server.n_threads < 4 || o.server.n_threads > 4096)
        return fail(fmt::format("--threads {} must be in [4, 4096]", o.server.n_threads));
    if (o.server.port < 0 || o.server.port > 65535)
        return fail(fmt::format("--port {} is not a port", o.server.port));
    if (o.server.default_max_tokens < 1)
        return fail(fmt::format("--default-max-tokens {} must be at least 1", o.server.default_max_tokens));
    if (!(o.grammar_timeout_s > 0 && o.grammar_timeout_s <= 3600))
        return fail(fmt::format("--grammar-timeout {} must be a number of seconds in (0, 3600]",
                                o.grammar_timeout_s));
    if (!(o.grammar_memory_mib >= 64 && o.grammar_memory_mib <= (int64_t(1) << 20)))
        return fail(fmt::format("--grammar-memory-mib {} must be in [64, 2^20]", o.grammar_memory_mib));
    o.engine.grammar_worker = own_executable();
    o.engine.grammar_timeout = std::chrono::milliseconds(int64_t(o.grammar_timeout_s * 1000));
    o.engine.grammar_memory_bytes = o.grammar_memory_mib << 20;
    if (o.engine.model_dir.empty()) {
        auto demo = demo::ensure_demo_model();
        if (!demo) return fail(demo.error().message);
        std::fprintf(stderr, "%s\n", demo::kDemoNotice);
        o.engine.model_dir = *demo;
        // A stable id for clients, whatever the demo's cache directory is called.
        if (o.server.served_model_name.empty()) o.server.served_model_name = "demo";
    }
    o.engine.state_memory_bytes = o.state_memory_mib << 20;
    o.engine.default_timeout = std::chrono::milliseconds(int64_t(o.request_timeout_s * 1000));

    // Block SIGINT/SIGTERM in every thread (the engine's and the server's inherit the mask); one thread
    // waits for them and stops the server.
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

    const runtime::BackendChoice backend = runtime::resolve_backend(o.engine.backend);
    o.engine.backend = backend.name;
    auto engine = Engine::create(o.engine);
    if (!engine) return fail(engine.error().message);
    server::HttpServer http(**engine, o.server);
    if (auto st = http.bind(); !st) return fail(st.error().message);
    const ModelInfo& mi = (*engine)->info();
    std::fprintf(
        stderr,
        "deepinfer: serving model '%s' (backend %s: %s; context %lld tokens, state memory %lld MiB, prefix "
        "cache %s) on http://%s:%d\n",
        (o.server.served_model_name.empty() ? mi.name : o.server.served_model_name).c_str(),
        o.engine.backend.c_str(), backend.why.c_str(), (long long)mi.max_context,
        (long long)o.state_memory_mib, o.engine.prefix_cache ? "on" : "off", o.server.host.c_str(),
        http.port());
    std::fflush(stderr);

    std::thread waiter([&] {
        int sig = 0;
        sigwait(&sigs, &sig);
        if (sig != 0) std::fprintf(stderr, "deepinfer: signal %d, shutting down\n", sig);
        // Requests end first (streams get an error event and [DONE], queued ones a 503), then the listener.
        (*engine)->shutdown();
        http.drain_and_stop(std::chrono::seconds(10));
    });
    const Status st = http.run();
    pthread_kill(waiter.native_handle(), SIGTERM);  // wakes the waiter if the server stopped by itself
    waiter.join();
    if (!st) return fail(st.error().message);
    return 0;
}

std::function<int()> setup(CLI::App& app) {
    auto o = std::make_shared<ServeOptions>();
    o->engine.backend =
        "auto";  // the fastest verified backend here, as every model command; `ref` is the spec
    app.add_option("-m,--model,model", o->engine.model_dir,
                   "model directory (default: the built-in demo model)");
    app.add_option("--backend", o->engine.backend,
                   "auto (cuda where a GPU is present, else cpu) | cpu | cuda | ref")
        ->capture_default_str();
    add_precision_option(app, o->engine.precision);
    add_graphs_option(app, o->engine.graphs);
    add_sample_candidates_option(app, o->engine.sample_candidates);
    add_expert_ranks_option(app, o->engine.expert_ranks);
    add_speculative_option(app, o->engine.speculative);
    app.add_flag("--prefix-cache,!--no-prefix-cache", o->engine.prefix_cache,
                 "keep prompt states at prefill chunk boundaries in the state memory no request holds, and "
                 "start a request whose prompt begins with one from it (the same output either way; "
                 "admission takes the memory back; the default)");
    app.add_option("--tokenizer", o->engine.tokenizer_path,
                   "tokenizer.json or its directory (default: the model's)");
    app.add_option("--host", o->server.host, "address to listen on")->capture_default_str();
    app.add_option("--port", o->server.port, "port (0: any free port)")->capture_default_str();
    app.add_option("--served-model-name", o->server.served_model_name,
                   "model id clients use (default: the directory name; \"demo\" for the demo model)");
    app.add_option("--api-key", o->server.api_key, "require 'Authorization: Bearer KEY'");
    app.add_option("--state-memory-mib", o->state_memory_mib,
                   "sequence-state memory for all requests (with --gpus N: over all N GPUs, an equal share "
                   "each, each "
                   "sequence on one)")
        ->capture_default_str();
    app.add_option("--max-running", o->engine.max_running, "requests in the batch at once")
        ->capture_default_str();
    app.add_option("--step-tokens", o->engine.step_token_budget,
                   "token budget per engine step (0: the backend's, 256 on cpu and ref, 4096 on cuda)")
        ->capture_default_str();
    app.add_option("--prefill-chunk", o->engine.prefill_chunk,
                   "prompt tokens per prefill chunk (0: the backend's, 128 on cpu and ref, 4096 on cuda)")
        ->capture_default_str();
    app.add_option("--max-waiting", o->engine.max_waiting, "queued requests before answering 429")
        ->capture_default_str();
    app.add_option("--max-context,--ctx-size,--max-model-len", o->engine.max_context,
                   "prompt + max_tokens limit (0: the model's)")
        ->capture_default_str();
    app.add_option("--default-max-tokens", o->server.default_max_tokens,
                   "max_tokens when a request gives none")
        ->capture_default_str();
    app.add_option("--request-timeout", o->request_timeout_s, "seconds before a request is stopped")
        ->capture_default_str();
    app.add_option("--max-body-bytes", o->max_body_bytes, "largest request body")->capture_default_str();
    app.add_option(
           "--grammar-timeout", o->grammar_timeout_s,
           "seconds a structured-output schema may take to compile (in a helper process; longer: 400)")
        ->capture_default_str();
    app.add_option("--grammar-memory-mib", o->grammar_memory_mib,
                   "memory a structured-output schema may take to compile (in a helper process; more: 400)")
        ->capture_default_str();
    app.add_flag("--check-weights", o->engine.check_weights, "scan every weight for NaN/infinity at load");
    app.add_option("--kernels", o->engine.kernels_file,
                   "kernel allow-list file (written by `deepinfer screen`)");
    app.add_flag("--split-special-tokens", o->server.split_special_tokens,
                 "encode special-token text inside chat messages as plain text (default: control tokens)");
    app.add_option("--read-timeout", o->server.read_timeout_s,
                   "seconds a client may take to send its request")
        ->capture_default_str();
    app.add_option("--write-timeout", o->server.write_timeout_s, "seconds a client may stall reading a reply")
        ->capture_default_str();
    app.add_option("--threads", o->server.n_threads, "connections served at once")->capture_default_str();
    app.add_option(
           "--log-level", o->log_level,
           "access lines on stderr: info (every request), warn (4xx/5xx), error (5xx), debug (also ignored "
           "request fields)")
        ->capture_default_str();
    return [o] { return run_serve(*o); };
}

}  // namespace

DI_COMMAND("serve", "OpenAI-compatible HTTP server (chat, completions, streaming) with continuous batching",
           setup);

}  // namespace di::cli
