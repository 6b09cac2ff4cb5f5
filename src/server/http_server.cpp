#include "server/http_server.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <thread>

#include "server/api_error.h"
#include "server/guarded_server.h"
#include "server/http.h"
#include "server/metrics.h"

namespace di::server {
namespace {

using json = nlohmann::json;
constexpr auto kPumpWait = std::chrono::milliseconds(100);

// The request a worker thread is serving: httplib runs routing, the handler, the response and the logger
// on one thread, so the access line is assembled here (a stream's body is written after the logger ran:
// its releaser writes that line).
struct RequestTrace {
    std::string id;
    std::chrono::steady_clock::time_point start{};
    RequestUsage usage;
    bool stream =
        false;  // a stream's line is written when its last event has gone out (the logger runs first)
};
thread_local RequestTrace t_trace;
std::atomic<uint64_t> g_next_request{1};

std::string next_request_id() { return fmt::format("req-{}", g_next_request.fetch_add(1)); }

// Paths and methods go into the access log as one printable line of bounded length (a 256 KiB request line,
// control bytes).
constexpr size_t kLoggedBytes = 200;

std::string error_message_of(const std::string& body) {
    const json j = json::parse(body, nullptr, false);
    if (j.is_object() && j.contains("error") && j["error"].is_object() && j["error"].contains("message") &&
        j["error"]["message"].is_string())
        return j["error"]["message"];
    return "";
}

// Metadata-only request fields (accepted and ignored: openai_request.cpp) present in a JSON body.
std::string ignored_fields_of(const std::string& body) {
    const json j = json::parse(body, nullptr, false);
    std::string out;
    if (!j.is_object()) return out;
    for (const char* key :
         {"user", "metadata", "store", "service_tier", "prompt_cache_key", "safety_identifier"})
        if (j.contains(key)) out += (out.empty() ? "" : ", ") + std::string(key);
    return out;
}

void send_error(httplib::Response& res, const ApiError& e) {
    res.status = e.status;
    // replace: a message may quote client bytes that are not UTF-8 (an undecodable path, say)
    res.set_content(e.to_json().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                    "application/json");
}

std::string status_message(int status, size_t max_body) {
    switch (status) {
        case 400:
            return "malformed HTTP request";
        case 404:
            return "no such endpoint";
        case 405:
            return "method not allowed on this endpoint";
        case 408:
            return "the request was not received in time";
        case 413:
            return fmt::format("the request body exceeds the limit of {} bytes", max_body);
        case 414:
            return "the request URI is too long";
        case 431:
            return "the request headers are too large";
        default:
            return fmt::format("HTTP error {}", status);
    }
}

}  // namespace

struct HttpServer::Impl {
    ServerContext ctx;
    AccessLog log;
    GuardedServer svr;
    int port = -1;
    int64_t started = 0;

    // Connections reading a request at once: a quarter of the workers, so slow or idle clients can never
    // hold them all.
    Impl(Engine& e, ServerOptions o, std::string name)
        : ctx{e, std::move(o), std::move(name), {}},
          log(ctx.opt.log_level),
          svr(std::chrono::seconds(ctx.opt.read_timeout_s), size_t(std::max(8, ctx.opt.n_threads / 4))) {}
    void routes();
    // Bearer token, or x-api-key (Anthropic's clients); `anthropic`: the 401 in Anthropic's error shape.
    bool authorized(const httplib::Request& req, httplib::Response& res, bool anthropic = false);
    void serve_generation(const httplib::Request& req, httplib::Response& res,
                          Reply (*handler)(ServerContext&, const std::string&, const ClientGone&),
                          bool anthropic = false);
};

HttpServer::HttpServer(Engine& engine, ServerOptions options) {
    std::string name = options.served_model_name.empty() ? engine.info().name : options.served_model_name;
    impl_ = std::make_unique<Impl>(engine, std::move(options), std::move(name));
    impl_->routes();
}

HttpServer::~HttpServer() { stop(); }

bool HttpServer::Impl::authorized(const httplib::Request& req, httplib::Response& res, bool anthropic) {
    if (ctx.opt.api_key.empty()) return true;
    if (req.get_header_value("Authorization") == "Bearer " + ctx.opt.api_key) return true;
    if (req.has_header("x-api-key") && req.get_header_value("x-api-key") == ctx.opt.api_key) return true;
    const ApiError e{401, "missing or wrong API key (Authorization: Bearer ... or x-api-key)", "",
                     "invalid_api_key"};
    if (!anthropic) return send_error(res, e), false;
    res.status = e.status;
    res.set_content(e.to_anthropic_json().dump(), "application/json");
    return false;
}

void HttpServer::Impl::serve_generation(const httplib::Request& req, httplib::Response& res,
                                        Reply (*handler)(ServerContext&, const std::string&,
                                                         const ClientGone&),
                                        bool anthropic) {
    GuardedServer::handler_started();
    if (!authorized(req, res, anthropic)) return;
    ClientGone gone = GuardedServer::client_gone();
    struct InFlight {  // counted while the handler runs, exceptions included (drain_and_stop waits for 0)
        std::atomic<int64_t>& n;
        explicit InFlight(std::atomic<int64_t>& c) : n(c) { ++n; }
        ~InFlight() { --n; }
    };
    Reply r = [&] {
        InFlight counted(ctx.counters.generations_in_flight);
        return handler(ctx, req.body, gone);
    }();
    if (!r.stream) {
        t_trace.usage = r.usage;
        res.status = r.status;
        res.set_content(r.body, "application/json");
        return;
    }
    // The provider owns the producer: when the response goes away (done, or the client left) the producer's
    // destructor cancels unfinished requests, which frees their state at the engine's next step.
    std::shared_ptr<SseProducer> producer(std::move(r.stream));
    t_trace.stream = true;
    AccessRecord line{t_trace.id, req.method, quote_line(req.path, kLoggedBytes), 200, {}, 0, ""};
    const auto start = t_trace.start;
    AccessLog* log_to = &log;
    ServerCounters* counters = &ctx.counters;
    res.status = 200;
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [producer, counters](size_t, httplib::DataSink& sink) {
            std::string out;
            const bool more = producer->pump(out, kPumpWait);
            if (!out.empty() && !sink.write(out.data(), out.size())) {
                ++counters->client_disconnects;
                return false;
            }
            if (!more) sink.done();
            return true;
        },
        [producer, counters, line, start, log_to](bool success) mutable {
            if (!success) ++counters->client_disconnects;
            line.usage = producer->usage();
            line.total_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            if (!success) line.error = "the client left before the end of the stream";
            log_to->write(line);
        });
}

void HttpServer::Impl::routes() {
    started =
        std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
            .count();
    const ServerOptions& o = ctx.opt;
    const int n_threads = std::max(4, o.n_threads);
    svr.new_task_queue = [n_threads] { return new httplib::ThreadPool(size_t(n_threads)); };
    svr.set_payload_max_length(o.max_body_bytes);
    svr.set_read_timeout(o.read_timeout_s, 0);
    svr.set_write_timeout(o.write_timeout_s, 0);
    svr.set_keep_alive_timeout(5);
    svr.set_keep_alive_max_count(100);  // requests per connection (pipelined clients send many)

    svr.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
        t_trace = RequestTrace{next_request_id(), std::chrono::steady_clock::now(), {}, {}};
        res.set_header("X-Request-Id", t_trace.id);
        // A body (POST) must follow within the read deadline; a GET has none and is answered at once.
        if (req.method == "GET" || req.method == "HEAD")
            GuardedServer::handler_started();
        else
            GuardedServer::headers_read();
        ++ctx.counters.http_requests;
        return httplib::Server::HandlerResponse::Unhandled;
    });
    svr.set_post_routing_handler([this](const httplib::Request&, httplib::Response& res) {
        if (res.status >= 400) ++ctx.counters.http_errors;
    });
    // After a plain response is sent (a stream's body is written after this: its releaser logs it); also for
    // requests refused before routing.
    svr.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
        RequestTrace t = std::move(t_trace);
        t_trace = {};
        AccessRecord r;
        const bool routed = !t.id.empty();
        r.id = routed ? t.id : next_request_id();
        if (log.level() >= LogLevel::kDebug && req.method == "POST")
            if (const std::string f = ignored_fields_of(req.body); !f.empty())
                log.debug(r.id, "accepted and ignored (metadata only): " + f);
        if (t.stream) return;  // its line is written by the stream's releaser, after the last event
        r.method = quote_line(req.method, kLoggedBytes), r.path = quote_line(req.path, kLoggedBytes),
        r.status = res.status;
        r.usage = t.usage;
        if (routed)
            r.total_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t.start).count();
        if (res.status >= 400 && log.wants(res.status)) r.error = error_message_of(res.body);
        log.write(r);
    });
    const size_t max_body = o.max_body_bytes;
    svr.set_error_handler(
        httplib::Server::HandlerWithResponse([max_body](const httplib::Request&, httplib::Response& res) {
            if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;  // ours, already JSON
            send_error(res, ApiError{res.status, status_message(res.status, max_body), "", ""});
            return httplib::Server::HandlerResponse::Handled;
        }));
    svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown";
        try {
            if (ep) std::rethrow_exception(ep);
        } catch (const std::exception& e) {
            what = e.what();
        } catch (...) {
        }
        send_error(res, ApiError{500, "internal error: " + what, "", "internal_error"});
    });

    svr.Get("/health", [](const httplib::Request&, httplib::Response& res) {
        res.set_content(R"({"status":"ok"})", "application/json");
    });
    svr.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
        res.set_content(
            render_metrics(ctx.engine.stats(), ctx.counters, ctx.engine.kernel_uses(), read_process_memory()),
            "text/plain; version=0.0.4");
    });
    auto model_json = [this] {
        return json{{"id", ctx.model_name},
                    {"object", "model"},
                    {"created", started},
                    {"owned_by", "deepinfer"},
                    {"max_model_len", ctx.engine.info().max_context}};
    };
    svr.Get("/v1/models", [this, model_json](const httplib::Request& req, httplib::Response& res) {
        if (!authorized(req, res)) return;
        res.set_content(json{{"object", "list"}, {"data", json::array({model_json()})}}.dump(),
                        "application/json");
    });
    svr.Get(R"(/v1/models/(.+))", [this, model_json](const httplib::Request& req, httplib::Response& res) {
        if (!authorized(req, res)) return;
        if (req.matches[1] != ctx.model_name)
            return send_error(
                res, ApiError{404, fmt::format("the model '{}' does not exist", req.matches[1].str()),
                              "model", "model_not_found"});
        res.set_content(model_json().dump(), "application/json");
    });
    svr.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
        serve_generation(req, res, &handle_chat);
    });
    svr.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
        serve_generation(req, res, &handle_completion);
    });
    svr.Post("/v1/messages", [this](const httplib::Request& req, httplib::Response& res) {
        serve_generation(req, res, &handle_messages, true);
    });
    svr.Post("/reset_prefix_cache", [this](const httplib::Request& req, httplib::Response& res) {
        if (!authorized(req, res)) return;
        const auto [states, bytes] = ctx.engine.reset_prefix_cache();
        res.set_content(json{{"states_dropped", states}, {"bytes_freed", bytes}}.dump(), "application/json");
    });
    for (auto [path, handler] :
         {std::pair{"/tokenize", &handle_tokenize}, std::pair{"/detokenize", &handle_detokenize}})
        svr.Post(path, [this, handler](const httplib::Request& req, httplib::Response& res) {
            GuardedServer::handler_started();
            if (!authorized(req, res)) return;
            const Reply r = handler(ctx, req.body);
            res.status = r.status;
            res.set_content(r.body, "application/json");
        });
}

Status HttpServer::bind() {
    const ServerOptions& o = impl_->ctx.opt;
    if (o.port == 0) {
        impl_->port = impl_->svr.bind_to_any_port(o.host);
        if (impl_->port < 0) return make_error(ErrorCode::kIo, "serve: cannot bind {} on any port", o.host);
    } else {
        if (!impl_->svr.bind_to_port(o.host, o.port))
            return make_error(ErrorCode::kIo, "serve: cannot bind {}:{} (in use, or not a local address?)",
                              o.host, o.port);
        impl_->port = o.port;
    }
    impl_->svr.widen_backlog();
    return ok_status();
}

int HttpServer::port() const { return impl_->port; }

Status HttpServer::run() {
    if (impl_->port < 0) DI_TRY_STATUS(bind());
    if (!impl_->svr.listen_after_bind()) return make_error(ErrorCode::kIo, "serve: the listener failed");
    return ok_status();
}

void HttpServer::drain_and_stop(std::chrono::milliseconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    const ServerCounters& c = impl_->ctx.counters;
    while ((c.streams_open > 0 || c.generations_in_flight > 0) && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    stop();
}

void HttpServer::stop() {
    if (impl_) impl_->svr.stop();
}

}  // namespace di::server
