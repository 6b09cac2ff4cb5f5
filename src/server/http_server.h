// The OpenAI-compatible HTTP server: routes, limits (body size, slow clients, connections), API-key check,
// OpenAI-style error bodies for every failure, SSE streaming with cancel-on-disconnect.
#pragma once

#include <memory>

#include "core/error.h"
#include "deepinfer/engine.h"
#include "server/server_context.h"

namespace di::server {

class HttpServer {
  public:
    HttpServer(Engine& engine, ServerOptions options);
    ~HttpServer();
    // Binds host:port (port 0 picks a free one); a port in use or a bad host is an error.
    Status bind();
    int port() const;
    // Serves until stop() (from another thread or a signal handler thread).
    Status run();
    void stop();
    // Graceful shutdown, after Engine::shutdown() has ended every request: waits (at most `limit`) until
    // every reply, error events and `[DONE]` included, has been handed to its client, then stop().
    void drain_and_stop(std::chrono::milliseconds limit);

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace di::server
