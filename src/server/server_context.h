// What the OpenAI routes share, independent of the HTTP library: the engine, server options, counters, and
// the reply shape (a JSON body, or a producer of server-sent events the transport pumps until done).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "deepinfer/engine.h"
#include "server/access_log.h"

namespace di::server {

struct ServerOptions {
    std::string host = "127.0.0.1";
    int port = 8000;                // 0: any free port
    std::string served_model_name;  // "": the model directory's name
    size_t max_body_bytes = size_t(1) << 20;
    int read_timeout_s = 30;               // a client slower than this sending its request is dropped
    int write_timeout_s = 30;              // a client not reading its response for this long is dropped
    int n_threads = 256;                   // connections served at once (streams hold one each)
    int64_t default_max_tokens = 256;      // when a request gives none (capped by the context)
    std::string api_key;                   // "": no authentication
    bool split_special_tokens = false;     // chat message text never becomes control tokens (ChatOptions)
    LogLevel log_level = LogLevel::kInfo;  // access lines: info every request, warn 4xx/5xx, error 5xx
};

struct ServerCounters {
    std::atomic<uint64_t> http_requests{0}, http_errors{0}, streams_open{0}, client_disconnects{0};
    std::atomic<int64_t> generations_in_flight{0};  // generation handlers running (drain waits for 0)
};

struct ServerContext {
    Engine& engine;
    ServerOptions opt;
    std::string model_name;
    ServerCounters counters;
};

// Produces the body of a streaming reply. Destroying it cancels every unfinished request it owns.
class SseProducer {
  public:
    virtual ~SseProducer() = default;
    // Waits up to `wait` for output and appends SSE text to `out`. Returns false once the stream is complete
    // (its last text, "data: [DONE]\n\n", has been appended).
    virtual bool pump(std::string& out, std::chrono::milliseconds wait) = 0;
    virtual RequestUsage usage() const { return {}; }  // so far (the access line is written at the end)
};

struct Reply {
    int status = 200;
    std::string body;                     // JSON text when not streaming
    std::unique_ptr<SseProducer> stream;  // set for stream: true
    RequestUsage usage = {};              // of a finished non-streaming generation
};

// The client went away (checked while a non-streaming request runs).
using ClientGone = std::function<bool()>;

Reply handle_chat(ServerContext& ctx, const std::string& body, const ClientGone& gone);
Reply handle_completion(ServerContext& ctx, const std::string& body, const ClientGone& gone);
Reply handle_messages(ServerContext& ctx, const std::string& body, const ClientGone& gone);  // Anthropic
Reply handle_tokenize(ServerContext& ctx, const std::string& body);
Reply handle_detokenize(ServerContext& ctx, const std::string& body);

}  // namespace di::server
