// Prompt lines for `deepinfer chat`: on a terminal with line editing and history (libedit: arrows, Home/End,
// Ctrl-R, ...), otherwise (a pipe, a file, or a build without libedit) plain lines. The prompt goes to
// stderr, so stdout carries only the answers.
#pragma once

#include <memory>
#include <string>

namespace di::cli {

class LineReader {
  public:
    explicit LineReader(std::string prompt);
    ~LineReader();
    LineReader(const LineReader&) = delete;
    LineReader& operator=(const LineReader&) = delete;

    // One line without its newline; false at the end of input (Ctrl-D) or when a signal (Ctrl-C) ended the
    // read. Non-empty lines go into the history.
    bool read(std::string& line);

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace di::cli
