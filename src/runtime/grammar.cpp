#include "runtime/grammar.h"

#if DEEPINFER_WITH_GRAMMAR
#include <dlpack/dlpack.h>
#include <fmt/format.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>
#include <xgrammar/xgrammar.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <list>
#include <mutex>
#include <new>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "runtime/helper_process.h"

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

// Fills `mask` (one bit a token of the vocabulary) with the tokens the matcher allows next.
void fill_bitmask(xgrammar::GrammarMatcher& m, int64_t vocab_size, std::vector<uint32_t>& mask) {
    const int64_t words = (vocab_size + 31) / 32;
    mask.resize(size_t(words));
    int64_t shape[2] = {1, words};
    DLTensor t{};
    t.data = mask.data();
    t.device = DLDevice{kDLCPU, 0};
    t.ndim = 2;
    t.dtype = DLDataType{kDLInt, 32, 1};
    t.shape = shape;
    m.FillNextTokenBitmask(&t, 0);
}

// A grammar with no first token (a schema that only refers to itself, {"$ref": "#"}) compiles but admits no
// output: the sampler would have nothing to draw from, so the request is refused here instead.
bool admits_an_output(const xgrammar::CompiledGrammar& g, int64_t vocab_size) {
    xgrammar::GrammarMatcher m(g);
    std::vector<uint32_t> mask;
    fill_bitmask(m, vocab_size, mask);
    return m.IsTerminated() || std::any_of(mask.begin(), mask.end(), [](uint32_t w) { return w != 0; });
}

// The frames between the engine and its grammar worker (runtime/helper_process.h).
constexpr char kJsonVocab = 'J', kTagsVocab = 'T';  // the greeting: the two vocabularies, serialized
constexpr char kSchema = 'S', kTags = 'G';          // a request: a JSON schema, a structural tag
constexpr char kCompiled = 'K', kFailed = 'E';      // an answer: it compiled, or why not (the message)
constexpr uint64_t kMaxFrame = uint64_t(1) << 30;
// Compiled constraints kept for schemas sent again: at most this many, and this many bytes in all (a
// 3,000-property schema's grammar holds 7.7 MB; what the helper passes under its limit can hold far more).
constexpr size_t kRecent = 32;
constexpr size_t kRecentBytes = size_t(256) << 20;
// xgrammar's compilers keep a cache, bounded here (its default keeps every grammar ever compiled): without
// one every compilation redoes its setup for the vocabulary (~0.19 s at V4's, against ~0.025 s for a small
// schema).
constexpr int64_t kCompilerCacheBytes = int64_t(64) << 20;

xgrammar::CompiledGrammar compile_with(xgrammar::GrammarCompiler& json, xgrammar::GrammarCompiler& tags,
                                       char kind, const std::string& text) {
    if (kind == kTags) return tags.CompileStructuralTag(text);
    return json.CompileJSONSchema(text, kAnyWhitespace, std::nullopt,
                                  std::make_pair(std::string(", "), std::string(": ")), true);
}

constexpr size_t kMessageBytes = 2000;  // of xgrammar's messages, which can quote a whole schema

}  // namespace

struct ConstraintCompiler::Impl {
    Impl(const Tokenizer& tok, int64_t vocab_size, const std::vector<int32_t>& stop_ids, GrammarLimits l)
        : json_info(vocab_info(tok, vocab_size, stop_ids, false)),
          tags_info(vocab_info(tok, vocab_size, stop_ids, true)),
          json(json_info, 8, true, kCompilerCacheBytes),
          tags(tags_info, 8, true, kCompilerCacheBytes),
          limits(std::move(l)) {
        if (!limits.worker.empty())
            worker.emplace(std::vector<std::string>{limits.worker, "__grammar-worker",
                                                    std::to_string(limits.memory_bytes)},
                           std::vector<Frame>{{kJsonVocab, json_info.SerializeJSON()},
                                              {kTagsVocab, tags_info.SerializeJSON()}});
    }
    Result<xgrammar::CompiledGrammar> compile(char kind, const std::string& text);

    xgrammar::TokenizerInfo json_info;  // JSON values
    xgrammar::TokenizerInfo tags_info;  // structural tags (tool-call blocks)
    xgrammar::GrammarCompiler json, tags;
    GrammarLimits limits;
    std::optional<HelperProcess> worker;  // where a new grammar compiles first, within the limits
    struct Kept {
        std::string key;
        std::shared_ptr<const CompiledConstraint> compiled;
        size_t bytes;
    };
    std::list<Kept> recent;  // newest first
    size_t recent_bytes = 0;
    std::mutex mu;  // one compilation at a time: the compilers (and their caches) are shared
};

// The grammar of `text`, or the reason it has none (one line, without the kind's prefix). With a worker the
// grammar compiles there first, under the limits, and only then here: the same compiler on the same
// vocabulary takes the same time and memory, and a compiled grammar is faster made again than carried over
// (xgrammar's serialized form of a 300-property schema's grammar is 20 MB and took 1.2 s to write).
Result<xgrammar::CompiledGrammar> ConstraintCompiler::Impl::compile(char kind, const std::string& text) {
    if (worker) {
        Result<Frame> a = worker->call(Frame{kind, text}, limits.timeout, kMaxFrame);
        if (!a.ok() && a.error().code == ErrorCode::kCapacity)
            return make_error(ErrorCode::kInvalidArgument,
                              "its grammar did not compile within {:g} s (the server's --grammar-timeout); "
                              "fewer alternatives and smaller length or item bounds compile faster",
                              double(limits.timeout.count()) / 1000);
        if (!a.ok())
            return make_error(ErrorCode::kInvalidArgument,
                              "the grammar compiler stopped on it ({}; its memory limit is {} MiB)",
                              a.error().message, limits.memory_bytes >> 20);
        if (a->tag != kCompiled) return make_error(ErrorCode::kInvalidArgument, "{}", a->payload);
    }
    try {
        return compile_with(json, tags, kind, text);
    } catch (const std::exception& e) {
        return make_error(ErrorCode::kInvalidArgument, "{}", quote_line(e.what(), kMessageBytes));
    }
}

ConstraintCompiler::ConstraintCompiler(const Tokenizer& tokenizer, int64_t vocab_size,
                                       std::vector<int32_t> stop_ids, GrammarLimits limits)
    : impl_(std::make_unique<Impl>(tokenizer, vocab_size, stop_ids, std::move(limits))),
      vocab_size_(vocab_size) {}

ConstraintCompiler::~ConstraintCompiler() = default;

Result<std::shared_ptr<const CompiledConstraint>> ConstraintCompiler::compile(const OutputConstraint& c) {
    using Kind = OutputConstraint::Kind;
    if (c.kind == Kind::kNone) return make_error(ErrorCode::kInvalidArgument, "no constraint to compile");
    if (c.kind == Kind::kJsonSchema && !nlohmann::json::accept(c.json_schema))
        return make_error(ErrorCode::kInvalidArgument,
                          "response_format: json_schema.schema is not valid JSON");
    const char kind = c.kind == Kind::kStructuralTag ? kTags : kSchema;
    const std::string text = c.kind == Kind::kStructuralTag ? c.structural_tag
                             : c.kind == Kind::kJsonObject  ? R"({"type": "object"})"
                                                            : c.json_schema;
    const char* what = kind == kTags ? "tool_choice: the tools' schemas" : "response_format: the JSON schema";
    std::string key = kind + text;
    std::lock_guard lk(impl_->mu);
    auto& recent = impl_->recent;
    for (auto it = recent.begin(); it != recent.end(); ++it)
        if (it->key == key) {
            recent.splice(recent.begin(), recent, it);
            return recent.front().compiled;
        }
    Result<xgrammar::CompiledGrammar> g = impl_->compile(kind, text);
    if (!g.ok())
        return make_error(ErrorCode::kInvalidArgument, "{} cannot be used: {}", what, g.error().message);
    if (!admits_an_output(*g, vocab_size_))
        return make_error(ErrorCode::kInvalidArgument,
                          "{} admit{} no output (no first token is allowed; does it only refer to itself?)",
                          what, kind == kTags ? "" : "s");
    auto compiled =
        std::make_shared<const CompiledConstraint>(CompiledConstraint{std::move(*g), vocab_size_});
    const size_t bytes = compiled->grammar.MemorySizeBytes();
    if (bytes <= kRecentBytes / 4) {
        recent.push_front({std::move(key), compiled, bytes});
        impl_->recent_bytes += bytes;
        while (recent.size() > kRecent || impl_->recent_bytes > kRecentBytes) {
            impl_->recent_bytes -= recent.back().bytes;
            recent.pop_back();
        }
    }
    return compiled;
}

namespace {
// This process's address space now (/proc/self/statm's first field, in pages); 0 where it cannot be read.
int64_t mapped_bytes() {
    std::FILE* f = std::fopen("/proc/self/statm", "r");
    if (f == nullptr) return 0;
    long long pages = 0;
    const bool ok = std::fscanf(f, "%lld", &pages) == 1;
    std::fclose(f);
    return ok ? pages * int64_t(::sysconf(_SC_PAGESIZE)) : 0;
}
}  // namespace

int grammar_worker_main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "deepinfer: __grammar-worker MEMORY_BYTES is the server's grammar compiler\n");
        return 2;
    }
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlives the engine
    const int64_t memory = std::strtoll(argv[2], nullptr, 10);
    if (memory > 0) {  // on top of what the program maps before it compiles (a CUDA build's libraries: ~1 GB)
        const rlim_t limit = rlim_t(mapped_bytes() + memory);
        const rlimit r{limit, limit};
        ::setrlimit(RLIMIT_AS, &r);
    }
    // The frames go out on a copy of stdout; stdout itself goes to stderr, so that nothing a library
    // prints can break them.
    const int out = ::dup(1);
    ::dup2(2, 1);
    const auto never = std::chrono::steady_clock::time_point::max();
    auto vocab = [&](char tag) -> std::optional<xgrammar::TokenizerInfo> {
        Result<Frame> f = read_frame(0, never, kMaxFrame);
        if (!f.ok() || f->tag != tag) return std::nullopt;
        auto info = xgrammar::TokenizerInfo::DeserializeJSON(f->payload);
        if (info.index() != 0) return std::nullopt;
        return std::get<0>(std::move(info));
    };
    std::optional<xgrammar::TokenizerInfo> json_info = vocab(kJsonVocab), tags_info = vocab(kTagsVocab);
    if (!json_info || !tags_info) return 1;
    xgrammar::GrammarCompiler json(*json_info, 8, true, kCompilerCacheBytes),
        tags(*tags_info, 8, true, kCompilerCacheBytes);
    for (;;) {
        Result<Frame> req = read_frame(0, never, kMaxFrame);
        if (!req.ok()) return req.error().code == ErrorCode::kNotFound ? 0 : 1;
        Frame answer;
        bool out_of_memory = false;
        try {
            compile_with(json, tags, req->tag, req->payload);
            answer = Frame{kCompiled, ""};
        } catch (const std::bad_alloc&) {
            answer = Frame{kFailed, fmt::format("its grammar needs more than {} MiB to compile (the server's "
                                                "--grammar-memory-mib)",
                                                memory >> 20)};
            out_of_memory = true;
        } catch (const std::exception& e) {
            answer = Frame{kFailed, quote_line(e.what(), kMessageBytes)};
        }
        if (!write_frame(out, answer).ok()) return 1;
        if (out_of_memory) return 0;  // its heap may be in any state: the engine starts a fresh one
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
    fill_bitmask(impl_->matcher, impl_->g->vocab_size, mask);
}

bool ConstraintMatcher::accept(int32_t id) { return impl_->matcher.AcceptToken(id); }

bool ConstraintMatcher::terminated() const { return impl_->matcher.IsTerminated(); }

}  // namespace di::runtime

#else  // built with -DDEEPINFER_GRAMMAR=OFF: constrained requests are refused

namespace di::runtime {

struct CompiledConstraint {};
struct ConstraintCompiler::Impl {};
struct ConstraintMatcher::Impl {};

ConstraintCompiler::ConstraintCompiler(const Tokenizer&, int64_t vocab_size, std::vector<int32_t>,
                                       GrammarLimits)
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
int grammar_worker_main(int, char**) { return 2; }

}  // namespace di::runtime

#endif
