#include "server/openai_response.h"

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <random>

namespace di::server {

std::string make_id(const char* prefix, char sep) {
    static std::atomic<uint64_t> counter{0};
    static const uint64_t salt = std::random_device{}();
    return fmt::format("{}{}{:016x}{:08x}", prefix, sep, salt, counter.fetch_add(1) & 0xffffffffu);
}

int64_t unix_time() {
    return std::chrono::duration_cast<std::chrono::seconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

json usage_json(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens) {
    return json{{"prompt_tokens", prompt_tokens},
                {"completion_tokens", completion_tokens},
                {"total_tokens", prompt_tokens + completion_tokens},
                {"prompt_tokens_details", {{"cached_tokens", cached_tokens}}}};
}

std::string sse_stream_end(json base, bool include_usage, int64_t prompt_tokens, int64_t completion_tokens,
                           int64_t cached_tokens) {
    std::string out;
    if (include_usage) {
        base["choices"] = json::array();
        base["usage"] = usage_json(prompt_tokens, completion_tokens, cached_tokens);
        out = sse(base);
    }
    return out + kSseDone;
}

std::string sse(const json& j) {
    return "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

std::string token_piece(const Tokenizer* tok, int32_t id) {
    if (!tok) return fmt::format("<{}>", id);
    return std::string(tok->token_bytes(id));
}

namespace {

json bytes_of(const std::string& s) {
    json b = json::array();
    for (unsigned char c : s) b.push_back(int(c));
    return b;
}

}  // namespace

json chat_logprob_entries(const Tokenizer* tok, const std::vector<GeneratedToken>& tokens) {
    json content = json::array();
    for (const GeneratedToken& t : tokens) {
        const std::string piece = token_piece(tok, t.id);
        json top = json::array();
        for (const auto& [id, lp] : t.top) {
            const std::string p = token_piece(tok, id);
            top.push_back(json{{"token", p}, {"logprob", lp}, {"bytes", bytes_of(p)}});
        }
        content.push_back(json{
            {"token", piece}, {"logprob", t.logprob}, {"bytes", bytes_of(piece)}, {"top_logprobs", top}});
    }
    return content;
}

json empty_completion_logprobs() {
    return json{{"tokens", json::array()},
                {"token_logprobs", json::array()},
                {"top_logprobs", json::array()},
                {"text_offset", json::array()}};
}

void append_completion_logprobs(json& lp, const Tokenizer* tok, const std::vector<GeneratedToken>& tokens,
                                int64_t& text_offset) {
    for (const GeneratedToken& t : tokens) {
        const std::string piece = token_piece(tok, t.id);
        lp["tokens"].push_back(piece);
        lp["token_logprobs"].push_back(t.logprob);
        json top = json::object();
        for (const auto& [id, v] : t.top) top[token_piece(tok, id)] = v;
        lp["top_logprobs"].push_back(top);
        lp["text_offset"].push_back(text_offset);
        text_offset += int64_t(piece.size());
    }
}

json prompt_logprobs_json(const Tokenizer* tok, const std::vector<GeneratedToken>& entries, int k) {
    json out = json::array({nullptr});
    for (const GeneratedToken& t : entries) {
        json e = json::object();
        for (size_t i = 0; i < std::min(t.top.size(), size_t(std::max(k, 0))); ++i)
            e[std::to_string(t.top[i].first)] = {{"logprob", t.top[i].second},
                                                 {"rank", i + 1},
                                                 {"decoded_token", token_piece(tok, t.top[i].first)}};
        e[std::to_string(t.id)] = {
            {"logprob", t.logprob}, {"rank", t.rank}, {"decoded_token", token_piece(tok, t.id)}};
        out.push_back(std::move(e));
    }
    return out;
}

const char* api_finish_reason(FinishReason r, bool tool_calls) {
    if (r == FinishReason::kLength) return "length";
    return tool_calls ? "tool_calls" : "stop";
}

}  // namespace di::server
