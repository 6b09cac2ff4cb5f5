#include "server/guarded_server.h"

#include <sys/socket.h>

#include "server/conn_stream.h"

namespace di::server {
namespace {

struct Current {
    GuardedServer* server = nullptr;
    void* conn = nullptr;
};
thread_local Current t_current;
constexpr auto kSlowAfter = std::chrono::milliseconds(500);

}  // namespace

GuardedServer::GuardedServer(std::chrono::milliseconds read_deadline, size_t max_reading)
    : read_deadline_(read_deadline), max_reading_(max_reading), watcher_([this] { watch(); }) {}

GuardedServer::~GuardedServer() {
    {
        std::lock_guard lk(mu_);
        stopping_ = true;
    }
    cv_.notify_all();
    watcher_.join();
}

void GuardedServer::shut_locked(Conn& c) {
    if (c.shut) return;
    c.shut = true;
    ::shutdown(c.sock, SHUT_RDWR);  // the worker's blocked read returns; it closes the socket itself
}

void GuardedServer::arm(Conn& c, bool reading) {
    std::lock_guard lk(mu_);
    c.reading = reading;
    c.since = std::chrono::steady_clock::now();
}

void GuardedServer::headers_read() {
    if (t_current.server) t_current.server->arm(*static_cast<Conn*>(t_current.conn), true);
}

void GuardedServer::handler_started() {
    if (t_current.server) t_current.server->arm(*static_cast<Conn*>(t_current.conn), false);
}

void GuardedServer::widen_backlog() {
    const socket_t s = svr_sock_;
    if (s != INVALID_SOCKET) ::listen(s, SOMAXCONN);  // listen() again on a listening socket sets its backlog
}

std::function<bool()> GuardedServer::client_gone() {
    if (!t_current.server) return [] { return false; };
    const socket_t sock = static_cast<Conn*>(t_current.conn)->sock;
    return [sock] { return peer_closed(sock); };
}

void GuardedServer::watch() {
    std::unique_lock lk(mu_);
    while (!stopping_) {
        cv_.wait_for(lk, std::chrono::milliseconds(50));
        const auto now = std::chrono::steady_clock::now();
        size_t reading = 0;
        for (auto& [id, c] : conns_) reading += c.reading && !c.shut;
        for (auto& [id, c] : conns_) {  // oldest first
            if (!c.reading || c.shut) continue;
            const auto reading_for = now - c.since;
            // Over the cap only connections that have been reading a while go: a burst of clients that
            // send their requests at once (milliseconds) is never cut.
            if (reading_for > read_deadline_ || (reading > max_reading_ && reading_for > kSlowAfter)) {
                shut_locked(c);
                --reading;
            }
        }
    }
}

// The library's per-connection loop, with one stream for all requests of the connection (its read buffer
// keeps pipelined requests) and the connection registered with the watcher.
bool GuardedServer::process_and_close_socket(socket_t sock) {
    uint64_t id = 0;
    Conn* conn = nullptr;
    {
        std::lock_guard lk(mu_);
        id = next_++;
        conn = &conns_.emplace(id, Conn{sock, std::chrono::steady_clock::now()}).first->second;
    }
    cv_.notify_all();  // a burst of connections is trimmed without waiting for the next tick
    t_current = {this, conn};
    using std::chrono::microseconds, std::chrono::seconds;
    ConnStream strm(sock, seconds(read_timeout_sec_) + microseconds(read_timeout_usec_),
                    seconds(write_timeout_sec_) + microseconds(write_timeout_usec_));
    const std::function<bool()> stopping = [this] { return svr_sock_ == INVALID_SOCKET; };
    bool ret = false;
    for (size_t left = keep_alive_max_count_; left > 0 && !stopping(); --left) {
        if (!strm.has_buffered() && !wait_next_request(sock, seconds(keep_alive_timeout_sec_), stopping))
            break;
        bool closed = false;
        ret = process_request(strm, left == 1, closed, nullptr);
        if (!ret || closed) break;
        arm(*conn, true);  // the response is out: the next request's reading phase starts
    }
    t_current = {};
    {
        std::lock_guard lk(mu_);
        conns_.erase(id);  // before the close: the watcher never touches a reused descriptor
    }
    drain_and_close(sock);
    return ret;
}

}  // namespace di::server
