// Structured output on xgrammar (PyPI sdist, built from source by CMake): an OutputConstraint compiled
// against the tokenizer's vocabulary, then per request a matcher that says which tokens may come next.
// xgrammar's types stay inside grammar.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/error.h"
#include "deepinfer/request.h"
#include "deepinfer/tokenizer.h"

namespace di::runtime {

struct CompiledConstraint;  // a compiled grammar; immutable, shared by the requests that use it

// One per engine. Builds the vocabulary index once (all token byte strings; added tokens and ids beyond the
// tokenizer never match grammar text, `stop_ids` end a complete output). Thread-safe.
class ConstraintCompiler {
  public:
    ConstraintCompiler(const Tokenizer& tokenizer, int64_t vocab_size, std::vector<int32_t> stop_ids);
    ~ConstraintCompiler();
    // kInvalidArgument naming "response_format" when the schema is not valid JSON or not a usable schema.
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

}  // namespace di::runtime
