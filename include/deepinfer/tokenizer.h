// deepinfer text side: DeepSeek-V4 tokenizer (Hugging Face tokenizer.json, byte-identical ids), streaming
// detokenizer, V4 chat prompt encoding, and an incremental parser for model output (reasoning, content,
// DSML tool calls). Everything here is thread-safe for concurrent const use; StreamDecoder and
// ChatOutputParser hold per-request state and belong to one request each.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace di {

namespace tok {
struct TokenizerModel;
}

// ---------------------------------------------------------------------------------------------------------
// Tokenizer

class Tokenizer {
  public:
    // `path` is a tokenizer.json file or a directory holding one; tokenizer_config.json next to it (if
    // present) supplies bos/eos and add_bos_token. Errors name the file and field.
    static Result<Tokenizer> load(const std::string& path);

    // Text -> ids. Invalid UTF-8 is first replaced by U+FFFD per maximal subpart (as Python's
    // bytes.decode(errors="replace")). Added/special tokens in the text are matched, never split.
    // Without `add_bos`, BOS is prepended when tokenizer_config.json says add_bos_token (V4: false).
    std::vector<int32_t> encode(std::string_view text) const;
    std::vector<int32_t> encode(std::string_view text, bool add_bos) const;
    // As encode(text, add_bos), but added tokens whose text overlaps one of `plain` (byte ranges of `text`)
    // are encoded as ordinary text. Unlike Hugging Face's split_special_tokens this covers every added
    // token, not only those marked special: V4 marks its chat markers (<｜User｜>, <think>) non-special, and
    // user text must not be able to produce them. For invalid UTF-8 no added token matches in any range.
    struct TextRange {
        size_t begin = 0, end = 0;
    };
    std::vector<int32_t> encode(std::string_view text, bool add_bos, std::span<const TextRange> plain) const;
    // Offset of the first byte of `text` that is not valid UTF-8, or nullopt. encode() replaces such bytes
    // by U+FFFD (as Python's bytes.decode(errors="replace")), since the reference tokenizer only takes
    // valid strings; callers that must not change the text refuse it with this offset instead.
    static std::optional<size_t> invalid_utf8_offset(std::string_view text);

    // Ids -> text. Fails on an id outside [0, vocab_size()). With skip_special, special tokens are left
    // out (what OpenAI-style responses show); otherwise they appear as their text.
    Result<std::string> decode(std::span<const int32_t> ids, bool skip_special = false) const;

    int32_t vocab_size() const;  // number of ids, including added tokens (V4: 129280)
    int32_t bos_id() const;      // -1 when unknown
    int32_t eos_id() const;      // -1 when unknown
    bool add_bos() const;        // tokenizer_config.json add_bos_token

    // Id of an added/special token ("<｜User｜>", "</think>") or of a plain vocabulary token given in
    // its stored (byte-level) spelling; nullopt when there is none.
    std::optional<int32_t> token_id(std::string_view token) const;
    // Stored spelling of `id` (byte-level alphabet for plain tokens); empty when out of range.
    std::string_view token_text(int32_t id) const;
    // Raw bytes `id` decodes to (may be part of a UTF-8 character); empty when out of range.
    std::string_view token_bytes(int32_t id) const;
    bool is_special(int32_t id) const;
    // An added token (special or not: V4's chat markers, "<think>", "</think>"), never plain text.
    bool is_added(int32_t id) const;

    const tok::TokenizerModel& model() const { return *model_; }

  private:
    explicit Tokenizer(std::shared_ptr<const tok::TokenizerModel> m) : model_(std::move(m)) {}
    std::shared_ptr<const tok::TokenizerModel> model_;
};

// Incremental detokenizer: push ids one at a time; each call returns the text that is complete so far.
// It never returns part of a UTF-8 character; concatenating every push() and finish() equals decode().
class StreamDecoder {
  public:
    explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special = false);
    Result<std::string> push(int32_t id);
    // Emits what is still held back (an incomplete character becomes U+FFFD) and resets.
    std::string finish();

  private:
    Tokenizer tokenizer_;
    bool skip_special_;
    std::string pending_;  // bytes of an unfinished UTF-8 character (at most 3)
};

// ---------------------------------------------------------------------------------------------------------
// Chat prompt encoding, byte-identical to DeepSeek's V4 reference encoder (encoding_dsv4.py, as vendored by
// vLLM: vllm/tokenizers/deepseek_v4_encoding.py).

struct ChatToolCall {
    std::string id;  // matches ChatMessage::tool_call_id of the result (orders results)
    std::string name;
    std::string arguments;  // JSON object text, as in OpenAI's function.arguments
};

struct ChatMessage {
    std::string role;  // "system" | "developer" | "user" | "assistant" | "tool" | "latest_reminder"
    std::string content;
    std::string reasoning_content;         // assistant: the thinking text (without <think> tags)
    std::vector<ChatToolCall> tool_calls;  // assistant
    std::string tool_call_id;              // tool: which call this result answers
    std::vector<std::string> tools;        // system/developer: OpenAI tool objects as JSON text
    std::string response_format;           // system/developer: JSON text, empty for none
    bool wo_eos = false;                   // assistant: leave the turn open (no end-of-sentence)
};

struct ChatOptions {
    bool thinking = false;         // thinking mode: the prompt ends with "<think>", else "</think>"
    bool drop_thinking = true;     // drop reasoning of turns before the last user message
    std::string reasoning_effort;  // "", "high" or "max" ("max" adds DeepSeek's effort preamble)
    bool add_bos = true;
    // OpenAI `tools`: like vLLM's V4 wrapper, they go into a system message inserted first.
    std::vector<std::string> tools;
    // Message text (contents, reasoning, tool results) is encoded as plain text: spellings of added tokens
    // in it do not become control tokens (`--split-special-tokens`). Default: they do, as in DeepSeek's
    // encoder. Tool names, arguments and schemas are not covered.
    bool split_special_tokens = false;
};

// A rendered prompt and the byte ranges of message text in it, for Tokenizer::encode(text, false, plain).
struct ChatPrompt {
    std::string text;
    std::vector<Tokenizer::TextRange> plain;  // empty unless options.split_special_tokens
};
Result<ChatPrompt> encode_chat_prompt(const std::vector<ChatMessage>& messages, const ChatOptions& options);

// Messages -> prompt text (tokenize it with encode(prompt, false)). Errors name the message and field.
Result<std::string> encode_chat(const std::vector<ChatMessage>& messages, const ChatOptions& options);

// The shape V4's tool calls must take when a request demands them (OpenAI tool_choice "required" or a
// named function, or parallel_tool_calls false), as an xgrammar structural tag (JSON text, an
// OutputConstraint of kind kStructuralTag): "\n\n<｜DSML｜tool_calls>\n", invokes whose parameters follow
// each tool's JSON schema in DSML, "</｜DSML｜tool_calls>". `tools`: OpenAI tool objects (JSON text).
struct ToolCallDemand {
    enum class Mode { kRequired, kForced, kAtMostOne };  // kAtMostOne: free text, then zero or one call
    Mode mode = Mode::kRequired;
    std::string forced;    // kForced: the function's name (must be one of the tools)
    bool parallel = true;  // more than one call (kRequired only)
};
Result<std::string> dsml_tool_call_grammar(const std::vector<std::string>& tools,
                                           const ToolCallDemand& demand);

// ---------------------------------------------------------------------------------------------------------
// Model output parsing (streaming): separates reasoning, content and DSML tool calls.

struct ChatEvent {
    // A tool call streams as kToolCallStart (its name) then kToolCallArguments pieces that join into its
    // JSON arguments object, e.g. {"city": "Paris", "days": 3}; the next start or the end of output ends it.
    enum class Kind { kReasoning, kContent, kToolCallStart, kToolCallArguments };
    Kind kind = Kind::kContent;
    std::string text;  // kReasoning / kContent / kToolCallArguments: the new text (a delta)
    std::string name;  // kToolCallStart
};

class ChatOutputParser {
  public:
    // thinking: the prompt ended with "<think>", so output starts as reasoning until "</think>".
    explicit ChatOutputParser(bool thinking);
    ~ChatOutputParser();
    ChatOutputParser(ChatOutputParser&&) noexcept;
    ChatOutputParser& operator=(ChatOutputParser&&) noexcept;

    // Feed decoded text (any split, e.g. StreamDecoder output). Returns the events now certain. Text that
    // might start a marker is held back until it is decided; the events joined do not depend on the split.
    // Malformed tool-call text comes out as content (dsml_parser.cpp says which); the parser never fails.
    std::vector<ChatEvent> push(std::string_view text);
    // End of output: flushes held-back text (an unfinished block before its first call is returned as
    // content; an unfinished call is closed with what it streamed).
    std::vector<ChatEvent> finish();

  private:
    struct State;
    std::unique_ptr<State> state_;
};

}  // namespace di
