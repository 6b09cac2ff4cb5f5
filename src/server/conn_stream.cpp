#include "server/conn_stream.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace di::server {
namespace {

void numeric_address(const sockaddr_storage& a, socklen_t len, std::string& ip, int& port) {
    char host[NI_MAXHOST] = {0};
    if (getnameinfo(reinterpret_cast<const sockaddr*>(&a), len, host, sizeof host, nullptr, 0,
                    NI_NUMERICHOST) == 0)
        ip = host;
    if (a.ss_family == AF_INET)
        port = ntohs(reinterpret_cast<const sockaddr_in&>(a).sin_port);
    else if (a.ss_family == AF_INET6)
        port = ntohs(reinterpret_cast<const sockaddr_in6&>(a).sin6_port);
}

}  // namespace

bool socket_ready(socket_t sock, short events, std::chrono::microseconds timeout) {
    pollfd p{sock, events, 0};
    const auto end = std::chrono::steady_clock::now() + timeout;
    for (;;) {
        const auto left =
            std::chrono::ceil<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
        const int r = ::poll(&p, 1, int(std::max<int64_t>(0, left.count())));
        if (r > 0) return true;  // ready, or hung up / errored: the next read or write says which
        if (r == 0) return false;
        if (errno != EINTR) return false;
    }
}

ConnStream::ConnStream(socket_t sock, std::chrono::microseconds read_timeout,
                       std::chrono::microseconds write_timeout)
    : sock_(sock), read_timeout_(read_timeout), write_timeout_(write_timeout) {}

bool ConnStream::is_readable() const { return has_buffered() || socket_ready(sock_, POLLIN, read_timeout_); }

bool ConnStream::is_writable() const {
    if (!socket_ready(sock_, POLLOUT, write_timeout_)) return false;
    pollfd p{sock_, POLLIN, 0};  // a peer that has gone shows as readable with nothing to read
    if (::poll(&p, 1, 0) > 0 && (p.revents & (POLLERR | POLLHUP | POLLNVAL))) return false;
    return true;
}

ssize_t ConnStream::read(char* ptr, size_t size) {
    if (!has_buffered()) {
        if (!socket_ready(sock_, POLLIN, read_timeout_)) return -1;
        ssize_t n;
        do n = ::recv(sock_, buf_, sizeof buf_, 0);
        while (n < 0 && errno == EINTR);
        if (n <= 0) return n;
        pos_ = 0;
        end_ = size_t(n);
    }
    const size_t take = std::min(size, end_ - pos_);
    std::memcpy(ptr, buf_ + pos_, take);
    pos_ += take;
    return ssize_t(take);
}

ssize_t ConnStream::write(const char* ptr, size_t size) {
    if (!is_writable()) return -1;
    ssize_t n;
    do n = ::send(sock_, ptr, size, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    return n;
}

void ConnStream::get_remote_ip_and_port(std::string& ip, int& port) const {
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    if (::getpeername(sock_, reinterpret_cast<sockaddr*>(&a), &len) == 0) numeric_address(a, len, ip, port);
}

void ConnStream::get_local_ip_and_port(std::string& ip, int& port) const {
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    if (::getsockname(sock_, reinterpret_cast<sockaddr*>(&a), &len) == 0) numeric_address(a, len, ip, port);
}

bool wait_next_request(socket_t sock, std::chrono::milliseconds timeout,
                       const std::function<bool()>& stopping) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (!stopping()) {
        if (socket_ready(sock, POLLIN, std::chrono::milliseconds(10))) return true;
        if (std::chrono::steady_clock::now() >= end) return false;
    }
    return false;
}

bool peer_closed(socket_t sock) {
    pollfd p{sock, POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLERR | POLLNVAL)) return true;
    char c;
    const ssize_t n = ::recv(sock, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

void drain_and_close(socket_t sock) {
    ::shutdown(sock, SHUT_WR);
    char sink[4096];
    size_t drained = 0;  // bounded: at most 1 MiB and 100 ms
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
    while (drained < (1u << 20)) {
        const auto left =
            std::chrono::duration_cast<std::chrono::microseconds>(end - std::chrono::steady_clock::now());
        if (left.count() <= 0 || !socket_ready(sock, POLLIN, left)) break;
        const ssize_t n = ::recv(sock, sink, sizeof sink, MSG_DONTWAIT);
        if (n <= 0) break;
        drained += size_t(n);
    }
    ::close(sock);
}

}  // namespace di::server
