// httplib::Server with a guard against slow and idle clients, and pipelining kept intact. Every connection
// is watched while it is *reading* (waiting for or receiving a request's headers and body): past
// `read_deadline` it is shut down, and when more than `max_reading` connections are reading at once the
// oldest that have been reading for over 0.5 s are shut down first, so a slowloris of hundreds of
// connections can never hold every worker (/health still answers) while a burst of real clients, which
// send their requests in milliseconds, is never cut. Once a handler runs the connection is not watched
// (streams last minutes). Requests on one connection share one socket stream, so pipelined requests are
// answered in order.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "server/http.h"

namespace di::server {

class GuardedServer final : public httplib::Server {
  public:
    GuardedServer(std::chrono::milliseconds read_deadline, size_t max_reading);
    ~GuardedServer() override;

    // Called on the worker thread of the current request: its headers are in (the body follows), and its
    // handler starts (reading is over).
    static void headers_read();
    static void handler_started();
    // For the handler of the current request: a test of whether its client has closed the connection
    // (false outside a connection).
    static std::function<bool()> client_gone();
    // After binding: the listen backlog as long as the system allows. The library listens with a backlog of
    // 5; a burst of clients (64 at once in the load test) on a busy machine then overflows the accept queue
    // and some connections are dropped before a worker ever sees them.
    void widen_backlog();

  private:
    struct Conn {
        socket_t sock;
        std::chrono::steady_clock::time_point since;  // start of the current reading phase
        bool reading = true;
        bool shut = false;
    };
    bool process_and_close_socket(socket_t sock) override;
    void arm(Conn& c, bool reading);
    void watch();
    void shut_locked(Conn& c);

    const std::chrono::milliseconds read_deadline_;
    const size_t max_reading_;
    std::mutex mu_;
    std::condition_variable cv_;
    std::map<uint64_t, Conn> conns_;  // by registration order: the oldest first
    uint64_t next_ = 0;
    bool stopping_ = false;
    std::thread watcher_;
};

}  // namespace di::server
