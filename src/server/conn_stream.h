// One client connection as an httplib::Stream: reads go through a buffer (pipelined requests wait in it
// between requests), and every read and write first waits for the socket with poll() under the server's
// read / write timeouts, so a silent client costs a worker at most one timeout per call.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "server/http.h"

namespace di::server {

class ConnStream final : public httplib::Stream {
  public:
    ConnStream(socket_t sock, std::chrono::microseconds read_timeout,
               std::chrono::microseconds write_timeout);

    bool is_readable() const override;  // buffered bytes, or the socket readable within the read timeout
    bool is_writable() const override;  // writable within the write timeout and the peer still there
    ssize_t read(char* ptr, size_t size) override;
    ssize_t write(const char* ptr, size_t size) override;
    void get_remote_ip_and_port(std::string& ip, int& port) const override;
    void get_local_ip_and_port(std::string& ip, int& port) const override;
    socket_t socket() const override { return sock_; }

    bool has_buffered() const { return pos_ < end_; }

  private:
    socket_t sock_;
    std::chrono::microseconds read_timeout_, write_timeout_;
    char buf_[16384];
    size_t pos_ = 0, end_ = 0;
};

// Waits up to `timeout` for the next request on an idle kept-alive connection, giving up early when
// `stopping()` turns true (polled every 10 ms). True when bytes (or a hang-up) arrived.
bool wait_next_request(socket_t sock, std::chrono::milliseconds timeout,
                       const std::function<bool()>& stopping);
bool socket_ready(socket_t sock, short events, std::chrono::microseconds timeout);

// True when the peer has closed its side (or the connection broke); bytes it sent and nobody read yet
// (a pipelined request) do not count as closed. Never blocks.
bool peer_closed(socket_t sock);

// Closes a connection without resetting it: the peer first gets our FIN, then unread request bytes are
// drained briefly, so a response sent before the whole request was read is not lost to an RST.
void drain_and_close(socket_t sock);

}  // namespace di::server
