// Structured output on xgrammar (PyPI sdist, built from source by CMake): an OutputConstraint compiled
// against the tokenizer's vocabulary, then per request a matcher that says which tokens may come next.
// xgrammar's types stay inside grammar.cpp.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "deepinfer/request.h"
#include "deepinfer/tokenizer.h"

namespace di::runtime {

struct CompiledConstraint;  // a compiled grammar; immutable, shared by the requests that use it

// Limits on compiling a grammar. A schema can make the grammar compiler run for minutes or take all memory
// (an anyOf of 2,000 strings with maxLength bounds grew the server to 13 GB in 2.5 minutes, still growing),
// so a server compiles each new one first in a helper process (`worker`, run as `worker __grammar-worker
// MEMORY_BYTES`) with a limit on the address space it adds, killed past the timeout; the schema is then
// refused (400) and the engine never compiles it. worker "": no helper, no limits (for embedders that trust
// their schemas).
struct GrammarLimits {
    std::string worker;
    std::chrono::milliseconds timeout{20000};
    int64_t memory_bytes = int64_t(4) << 30;
};

// One per engine. Builds the vocabulary index once (all token byte strings; added tokens and ids beyond the
// tokenizer never match grammar text, `stop_ids` end a complete output). Thread-safe.
class ConstraintCompiler {
  public:
    ConstraintCompiler(const Tokenizer& tokenizer, int64_t vocab_size, std::vector<int32_t> stop_ids,
                       GrammarLimits limits = {});
    ~ConstraintCompiler();
    // kInvalidArgument naming "response_format" (or "tool_choice" for tool-call tags) when the schema is not
    // valid JSON, not a usable schema, admits no output or does not compile within the limits. The last
    // compiled constraints are kept, so a schema sent again is not compiled again.
    Result<std::shared_ptr<const CompiledConstraint>> compile(const OutputConstraint& c);
    int64_t vocab_size() const { return vocab_size_; }

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
    int64_t vocab_size_;
};

// One per request: the grammar's position in the output so far.
class ConstraintMatcher {
  public:
    // stop_ids: the tokens that end a complete output (the request's stop tokens; the model's EOS if none).
    ConstraintMatcher(std::shared_ptr<const CompiledConstraint> g, std::vector<int32_t> stop_ids);
    ~ConstraintMatcher();
    ConstraintMatcher(ConstraintMatcher&&) noexcept;
    // Bit (v % 32) of word v / 32 set: token v may come next. `mask` is resized to the vocabulary's words.
    void fill_mask(std::vector<uint32_t>& mask);
    // Advances over a generated token; false when the grammar does not allow it (then the state is
    // unchanged).
    bool accept(int32_t id);
    // The output is complete (a stop token was accepted after a whole value).
    bool terminated() const;

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// The helper process's main (`deepinfer __grammar-worker MEMORY_BYTES`: cli/main.cpp): compiles what it
// reads on stdin with MEMORY_BYTES of address space beyond its own at start, answering on stdout. Returns
// its exit code.
int grammar_worker_main(int argc, char** argv);

}  // namespace di::runtime
