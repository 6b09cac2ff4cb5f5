#include "runtime/grammar.h"

#if DEEPINFER_WITH_GRAMMAR
#include <dlpack/dlpack.h>
#include <xgrammar/xgrammar.h>

#include <exception>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

namespace di::runtime {

struct CompiledConstraint {
    xgrammar::CompiledGrammar grammar;
    int64_t vocab_size;
};

namespace {

// JSON as OpenAI's structured output writes it: one space after ':' and ',' and no other whitespace.
// Free whitespace lets a model that likes spaces (or a random one) run to max_tokens without closing the
// value: with up to 16 per gap the tiny test model spent 120 tokens on a three-field object.
constexpr bool kAnyWhitespace = false;

// JSON values never contain an added token (chat markers, "</think>"); tool-call blocks need V4's
// non-special added tokens ("｜DSML｜", which the model writes as one token), so they keep those.
xgrammar::TokenizerInfo vocab_info(const Tokenizer& tok, int64_t vocab_size, std::vector<int32_t> stop_ids,
                                   bool keep_plain_added) {
    std::vector<std::string> vocab(static_cast<size_t>(vocab_size));  // "" never matches grammar text
    for (int32_t id = 0; id < tok.vocab_size() && id < vocab_size; ++id)
        if (keep_plain_added ? !tok.is_special(id) : !tok.is_added(id))
            vocab[size_t(id)] = std::string(tok.token_bytes(id));
    return xgrammar::TokenizerInfo(vocab, xgrammar::VocabType::RAW, int(vocab_size), std::move(stop_ids));
}

}  // namespace

struct ConstraintCompiler::Impl {
    Impl(const Tokenizer& tok, int64_t vocab_size, std::vector<int32_t> stop_ids)
        : json(vocab_info(tok, vocab_size, stop_ids, false), 8, true),
          tags(vocab_info(tok, vocab_size, stop_ids, true), 8, true) {}
    xgrammar::GrammarCompiler json;  // JSON values
    xgrammar::GrammarCompiler tags;  // structural tags (tool-call blocks)
    std::mutex mu;                   // one compilation at a time: the compilers' caches are shared
};

ConstraintCompiler::ConstraintCompiler(const Tokenizer& tokenizer, int64_t vocab_size,
                                       std::vector<int32_t> stop_ids)
    : impl_(std::make_unique<Impl>(tokenizer, vocab_size, std::move(stop_ids))), vocab_size_(vocab_size) {}

ConstraintCompiler::~ConstraintCompiler() = default;

Result<std::shared_ptr<const CompiledConstraint>> ConstraintCompiler::compile(const OutputConstraint& c) {
    using Kind = OutputConstraint::Kind;
    if (c.kind == Kind::kNone) return make_error(ErrorCode::kInvalidArgument, "no constraint to compile");
    std::string schema = c.kind == Kind::kJsonObject ? R"({"type": "object"})" : c.json_schema;
    if (c.kind == Kind::kJsonSchema && !nlohmann::json::accept(schema))
        return make_error(ErrorCode::kInvalidArgument,
                          "response_format: json_schema.schema is not valid JSON");
    std::lock_guard lk(impl_->mu);
    try {
        auto g =
            c.kind == Kind::kStructuralTag
                ? impl_->tags.CompileStructuralTag(c.structural_tag)
                : impl_->json.CompileJSONSchema(schema, kAnyWhitespace, std::nullopt,
                                                std::make_pair(std::string(", "), std::string(": ")), true);
        return std::make_shared<const CompiledConstraint>(CompiledConstraint{std::move(g), vocab_size_});
    } catch (const std::exception& e) {
        std::string what = e.what();
        for (char& ch : what)
            if (ch == '\n') ch = ' ';
        if (c.kind == Kind::kStructuralTag)
            return make_error(ErrorCode::kInvalidArgument,
                              "tool_choice: the tools' schemas cannot be used: {}", what);
        return make_error(ErrorCode::kInvalidArgument, "response_format: the JSON schema cannot be used: {}",
                          what);
    }
}

struct ConstraintMatcher::Impl {
    std::shared_ptr<const CompiledConstraint> g;
    xgrammar::GrammarMatcher matcher;
};

ConstraintMatcher::ConstraintMatcher(std::shared_ptr<const CompiledConstraint> g,
                                     std::vector<int32_t> stop_ids)
    : impl_(std::make_unique<Impl>(
          Impl{g, xgrammar::GrammarMatcher(
                      g->grammar, stop_ids.empty() ? std::nullopt : std::optional(std::move(stop_ids)))})) {}

ConstraintMatcher::~ConstraintMatcher() = default;
ConstraintMatcher::ConstraintMatcher(ConstraintMatcher&&) noexcept = default;

void ConstraintMatcher::fill_mask(std::vector<uint32_t>& mask) {
    const int64_t words = (impl_->g->vocab_size + 31) / 32;
    mask.resize(size_t(words));
    int64_t shape[2] = {1, words};
    DLTensor t{};
    t.data = mask.data();
    t.device = DLDevice{kDLCPU, 0};
    t.ndim = 2;
    t.dtype = DLDataType{kDLInt, 32, 1};
    t.shape = shape;
    impl_->matcher.FillNextTokenBitmask(&t, 0);
}

bool ConstraintMatcher::accept(int32_t id) { return impl_->matcher.AcceptToken(id); }

bool ConstraintMatcher::terminated() const { return impl_->matcher.IsTerminated(); }

}  // namespace di::runtime

#else  // built with -DDEEPINFER_GRAMMAR=OFF: constrained requests are refused

namespace di::runtime {

struct CompiledConstraint {};
struct ConstraintCompiler::Impl {};
struct ConstraintMatcher::Impl {};

ConstraintCompiler::ConstraintCompiler(const Tokenizer&, int64_t vocab_size, std::vector<int32_t>)
    : vocab_size_(vocab_size) {}
ConstraintCompiler::~ConstraintCompiler() = default;
Result<std::shared_ptr<const CompiledConstraint>> ConstraintCompiler::compile(const OutputConstraint&) {
    return make_error(
        ErrorCode::kInvalidArgument,
        "response_format: this build has no structured output (configured with DEEPINFER_GRAMMAR=OFF)");
}
ConstraintMatcher::ConstraintMatcher(std::shared_ptr<const CompiledConstraint>, std::vector<int32_t>) {}
ConstraintMatcher::~ConstraintMatcher() = default;
ConstraintMatcher::ConstraintMatcher(ConstraintMatcher&&) noexcept = default;
void ConstraintMatcher::fill_mask(std::vector<uint32_t>& mask) { mask.clear(); }
bool ConstraintMatcher::accept(int32_t) { return true; }
bool ConstraintMatcher::terminated() const { return false; }

}  // namespace di::runtime

#endif
