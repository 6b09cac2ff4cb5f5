// A helper process that answers requests over two pipes, for work that must not be able to stall or
// exhaust the engine (structured output's grammar compilation: runtime/grammar.cpp). The helper is an
// executable started with the given arguments, fed on its stdin and answering on its stdout in frames of
// one tag byte, an 8-byte little-endian length and the payload. A request that takes longer than its
// deadline kills the helper; the next request starts a fresh one.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "core/error.h"

namespace di::runtime {

struct Frame {
    char tag = 0;
    std::string payload;
};

// Both ends of the protocol. Writes block; EPIPE (the peer is gone) is an error, never a signal.
Status write_frame(int fd, const Frame& f);
// Reads one frame: kNotFound at the end of input before its first byte, kIo at an end within it, kCapacity
// past `deadline`, kFormat when its length exceeds `max_bytes`.
Result<Frame> read_frame(int fd, std::chrono::steady_clock::time_point deadline, uint64_t max_bytes);

class HelperProcess {
  public:
    // `argv[0]` is the executable; `greeting` frames are sent first on every start (the helper's setup).
    HelperProcess(std::vector<std::string> argv, std::vector<Frame> greeting);
    ~HelperProcess();
    HelperProcess(const HelperProcess&) = delete;
    HelperProcess& operator=(const HelperProcess&) = delete;

    // Sends `request` (starting the helper first where none runs) and returns its answer. kCapacity: no
    // answer within `timeout` (the helper is killed); kIo: the helper could not start or ended without
    // answering (a signal, an exit), the message saying how. A helper may end itself after answering.
    Result<Frame> call(const Frame& request, std::chrono::milliseconds timeout, uint64_t max_answer_bytes);

  private:
    Status start();
    void stop();  // SIGKILL and reap
    std::string how_it_ended();

    std::vector<std::string> argv_;
    std::vector<Frame> greeting_;
    pid_t pid_ = -1;
    int to_ = -1, from_ = -1;  // the helper's stdin and stdout, our ends
};

}  // namespace di::runtime
