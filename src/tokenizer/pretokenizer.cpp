// PCRE2 regex stages. The JIT stack grows on demand up to kJitStackMax so that long runs (a million
// spaces hit `\s+(?!\S)` backtracking) still match instead of failing.
#include "tokenizer/pretokenizer.h"

#include "tokenizer/unicode_classes.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace di::tok {

namespace {

constexpr size_t kJitStackStart = 32 * 1024;
constexpr size_t kJitStackMax = 256 * 1024 * 1024;

// Oniguruma (Ruby syntax, UTF-8) \s: 0009-000D, 0085, and General_Category Zs, Zl, Zp.
constexpr std::string_view kSpaceClass = "\\t\\n\\x0B\\f\\r\\x{85}\\p{Zs}\\p{Zl}\\p{Zp}";

}  // namespace

std::string oniguruma_to_pcre2(std::string_view p) {
    std::string out;
    bool in_class = false;
    for (size_t i = 0; i < p.size(); ++i) {
        const char c = p[i];
        if (c == '\\' && i + 1 < p.size()) {
            const char e = p[i + 1];
            if (e == 's' || e == 'S') {
                if (in_class && e == 's') {
                    out += kSpaceClass;
                } else if (!in_class) {
                    out += e == 's' ? "[" : "[^";
                    out += kSpaceClass;
                    out += "]";
                } else {
                    out.append(p.substr(i, 2));  // \S inside a class: rare, keep PCRE2's meaning
                }
            } else {
                out.append(p.substr(i, 2));
            }
            ++i;
            continue;
        }
        if (c == '[' && !in_class)
            in_class = true;
        else if (c == ']' && in_class)
            in_class = false;
        out.push_back(c);
    }
    return out;
}

struct PreTokenizer::Stage {
    pcre2_code* code = nullptr;
    ~Stage() { pcre2_code_free(code); }
};

// Per-thread match state, reused across calls (creating it costs more than encoding a short message).
// A match data block may serve any pattern with at most kMaxPairs capture pairs.
struct Scratch {
    static constexpr uint32_t kMaxPairs = 16;
    pcre2_match_data* match = pcre2_match_data_create(kMaxPairs, nullptr);
    pcre2_match_context* context = pcre2_match_context_create(nullptr);
    pcre2_jit_stack* jit_stack = pcre2_jit_stack_create(kJitStackStart, kJitStackMax, nullptr);
    std::vector<std::string_view> a, b;
    std::string mapped;  // text with Unicode 16 stand-ins (unicode_classes.h)
    Scratch() { pcre2_jit_stack_assign(context, nullptr, jit_stack); }
    ~Scratch() {
        pcre2_match_data_free(match);
        pcre2_match_context_free(context);
        pcre2_jit_stack_free(jit_stack);
    }
};

Scratch& thread_scratch() {
    thread_local Scratch s;
    return s;
}

PreTokenizer::PreTokenizer() = default;
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;
PreTokenizer::~PreTokenizer() = default;

Result<PreTokenizer> PreTokenizer::build(const std::vector<std::string>& patterns) {
    PreTokenizer pt;
    for (size_t k = 0; k < patterns.size(); ++k) {
        const std::string pcre = oniguruma_to_pcre2(patterns[k]);
        int err = 0;
        PCRE2_SIZE offset = 0;
        pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pcre.data()), pcre.size(),
                                         PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &err, &offset, nullptr);
        if (!code) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(err, msg, sizeof(msg));
            return make_error(ErrorCode::kFormat,
                              "tokenizer.json: pre_tokenizer split regex #{} '{}': {} at offset {}", k,
                              patterns[k], reinterpret_cast<char*>(msg), offset);
        }
        pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter when JIT is unavailable
        auto stage = std::make_unique<Stage>();
        stage->code = code;
        pt.stages_.push_back(std::move(stage));
    }
    return pt;
}

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& out) const {
    Scratch& scratch = thread_scratch();
    std::vector<std::string_view>& cur = scratch.a;
    std::vector<std::string_view>& next = scratch.b;
    const bool mapped = map_to_standins(text, scratch.mapped);
    const std::string_view subject_text = mapped ? std::string_view(scratch.mapped) : text;
    cur.assign(1, subject_text);
    for (size_t k = 0; k < stages_.size(); ++k) {
        next.clear();
        pcre2_code* code = stages_[k]->code;
        pcre2_match_data* md = scratch.match;
        for (std::string_view piece : cur) {
            const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
            size_t pos = 0, last = 0;
            while (pos < piece.size()) {
                const int rc =
                    pcre2_match(code, subject, piece.size(), pos, PCRE2_NO_UTF_CHECK, md, scratch.context);
                if (rc < 0) break;  // no match (or a resource limit: the rest stays one piece)
                const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
                if (ov[1] == ov[0]) {  // empty match: advance one code point, as tokenizers' find_iter does
                    pos = ov[0] + 1;
                    while (pos < piece.size() && (static_cast<unsigned char>(piece[pos]) & 0xC0) == 0x80)
                        ++pos;
                    continue;
                }
                if (ov[0] > last) next.push_back(piece.substr(last, ov[0] - last));
                next.push_back(piece.substr(ov[0], ov[1] - ov[0]));
                pos = last = ov[1];
            }
            if (last < piece.size()) next.push_back(piece.substr(last));
        }
        std::swap(cur, next);
    }
    for (std::string_view piece : cur)  // same offsets in the original text
        out.push_back(text.substr(static_cast<size_t>(piece.data() - subject_text.data()), piece.size()));
}

}  // namespace di::tok
