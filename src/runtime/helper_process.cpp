#include "runtime/helper_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

extern char** environ;

namespace di::runtime {

namespace {

// Writes with SIGPIPE blocked in this thread, so a helper that died answers EPIPE instead of ending the
// process; a SIGPIPE raised meanwhile is taken from the pending set before the mask is restored.
Status write_all(int fd, const char* data, size_t n) {
    sigset_t pipe_only, old;
    sigemptyset(&pipe_only);
    sigaddset(&pipe_only, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_only, &old);
    int err = 0;
    while (n > 0) {
        const ssize_t w = ::write(fd, data, n);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) {
            err = errno;
            break;
        }
        data += w, n -= size_t(w);
    }
    if (err == EPIPE) {
        const timespec zero{0, 0};
        while (sigtimedwait(&pipe_only, nullptr, &zero) == SIGPIPE) {
        }
    }
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    if (err != 0) return make_error(ErrorCode::kIo, "write to the helper process: {}", std::strerror(err));
    return ok_status();
}

// n bytes into `out`; kNotFound where the input ends before the first byte (`at_start`), kIo later.
Status read_all(int fd, char* out, size_t n, std::chrono::steady_clock::time_point deadline, bool at_start) {
    size_t got = 0;
    while (got < n) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) return make_error(ErrorCode::kCapacity, "no answer in time");
        pollfd p{fd, POLLIN, 0};
        const int r = ::poll(&p, 1, int(std::min<int64_t>(left.count(), 1 << 30)));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return make_error(ErrorCode::kIo, "poll: {}", std::strerror(errno));
        if (r == 0) continue;  // the deadline is checked above
        const ssize_t k = ::read(fd, out + got, n - got);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0)
            return make_error(ErrorCode::kIo, "read from the helper process: {}", std::strerror(errno));
        if (k == 0)
            return make_error(at_start && got == 0 ? ErrorCode::kNotFound : ErrorCode::kIo,
                              "the helper process closed its output");
        got += size_t(k);
    }
    return ok_status();
}

}  // namespace

Status write_frame(int fd, const Frame& f) {
    char head[9];
    head[0] = f.tag;
    uint64_t n = f.payload.size();
    for (int i = 0; i < 8; ++i) head[1 + i] = char((n >> (8 * i)) & 0xff);
    DI_TRY_STATUS(write_all(fd, head, sizeof head));
    return write_all(fd, f.payload.data(), f.payload.size());
}

Result<Frame> read_frame(int fd, std::chrono::steady_clock::time_point deadline, uint64_t max_bytes) {
    char head[9];
    DI_TRY_STATUS(read_all(fd, head, sizeof head, deadline, true));
    uint64_t n = 0;
    for (int i = 0; i < 8; ++i) n |= uint64_t(uint8_t(head[1 + i])) << (8 * i);
    if (n > max_bytes)
        return make_error(ErrorCode::kFormat, "a frame of {} bytes, more than the {} allowed", n, max_bytes);
    Frame f{head[0], std::string(size_t(n), '\0')};
    DI_TRY_STATUS(read_all(fd, f.payload.data(), size_t(n), deadline, false));
    return f;
}

HelperProcess::HelperProcess(std::vector<std::string> argv, std::vector<Frame> greeting)
    : argv_(std::move(argv)), greeting_(std::move(greeting)) {}

HelperProcess::~HelperProcess() { stop(); }

Status HelperProcess::start() {
    int in[2], out[2];  // [0] read end, [1] write end; close-on-exec so no other child inherits them
    if (::pipe2(in, O_CLOEXEC) != 0) return make_error(ErrorCode::kIo, "pipe: {}", std::strerror(errno));
    if (::pipe2(out, O_CLOEXEC) != 0) {
        ::close(in[0]), ::close(in[1]);
        return make_error(ErrorCode::kIo, "pipe: {}", std::strerror(errno));
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);  // dup2 clears close-on-exec on 0 and 1
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawnattr_t attr;  // the engine blocks signals in its threads: the helper starts with none blocked
    posix_spawnattr_init(&attr);
    sigset_t none;
    sigemptyset(&none);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
    std::vector<char*> args;
    for (std::string& a : argv_) args.push_back(a.data());
    args.push_back(nullptr);
    const int rc = posix_spawn(&pid_, argv_[0].c_str(), &fa, &attr, args.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    ::close(in[0]), ::close(out[1]);
    to_ = in[1], from_ = out[0];
    if (rc != 0) {
        pid_ = -1;
        stop();
        return make_error(ErrorCode::kIo, "could not start the helper process {}: {}", argv_[0],
                          std::strerror(rc));
    }
    for (const Frame& f : greeting_)
        if (!write_frame(to_, f).ok())
            return make_error(ErrorCode::kIo, "the helper process {}", how_it_ended());
    return ok_status();
}

std::string HelperProcess::how_it_ended() {
    if (pid_ < 0) return "is not running";
    ::kill(pid_, SIGKILL);  // a no-op where it has ended
    int st = 0;
    while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    stop();
    if (WIFSIGNALED(st)) {
        const int sig = WTERMSIG(st);
        return sig == SIGKILL ? "was killed" : "ended on signal " + std::to_string(sig);
    }
    return "exited with status " + std::to_string(WEXITSTATUS(st));
}

void HelperProcess::stop() {
    if (to_ >= 0) ::close(to_);
    if (from_ >= 0) ::close(from_);
    to_ = from_ = -1;
    if (pid_ > 0) {
        ::kill(pid_, SIGKILL);
        while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
        }
    }
    pid_ = -1;
}

Result<Frame> HelperProcess::call(const Frame& request, std::chrono::milliseconds timeout,
                                  uint64_t max_answer_bytes) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    // A helper that ended since the last call (it ends itself after some answers; PR_SET_PDEATHSIG ends it
    // with the thread that started it) is found when the request cannot be written or its answer ends before
    // a byte: then the request goes once more to a fresh helper, within the same deadline.
    for (int attempt = 0;; ++attempt) {
        if (pid_ < 0) DI_TRY_STATUS(start());
        const bool sent = write_frame(to_, request).ok();
        Result<Frame> answer = sent ? read_frame(from_, deadline, max_answer_bytes)
                                    : Result<Frame>(make_error(ErrorCode::kNotFound, "not sent"));
        if (answer.ok()) return answer;
        const ErrorCode code = answer.error().code;
        if (code == ErrorCode::kCapacity || code == ErrorCode::kFormat) {
            stop();  // late or oversized: the helper's state is unknown
            return answer.error();
        }
        const std::string how = how_it_ended();
        if (code != ErrorCode::kNotFound || attempt > 0)
            return make_error(ErrorCode::kIo, "the helper process {} without answering", how);
    }
}

}  // namespace di::runtime
