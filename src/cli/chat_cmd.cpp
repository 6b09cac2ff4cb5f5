// deepinfer run (one chat turn) and deepinfer chat (interactive, with history, /reset, line editing on a
// terminal; Ctrl-C stops the current answer, and at the prompt quits). Prompts use DeepSeek-V4's chat
// encoding.
#include <fmt/format.h>

#include <cstdio>
#include <iostream>

#include "cli/command.h"
#include "cli/generate_common.h"
#include "cli/line_reader.h"

namespace di::cli {
namespace {

struct Options : GenOptions {
    std::string prompt, system;
    bool thinking = false, split_special = false;
};

ChatMessage message(const std::string& role, const std::string& content) {
    ChatMessage m;
    m.role = role;
    m.content = content;
    return m;
}

Result<std::vector<int32_t>> encode_turns(const Tokenizer& tok, const std::vector<ChatMessage>& msgs,
                                          const Options& o) {
    ChatOptions co;
    co.thinking = o.thinking;
    co.split_special_tokens = o.split_special;
    DI_TRY(ChatPrompt p, encode_chat_prompt(msgs, co));
    return tok.encode(p.text, false, p.plain);
}

void add_chat_options(CLI::App& app, Options& o) {
    add_model_options(app, o);
    add_speculative_option(app, o.speculative);
    app.add_option("--system", o.system, "system prompt");
    app.add_flag("--thinking", o.thinking, "thinking mode (the model reasons before answering)");
    app.add_flag("--split-special-tokens", o.split_special,
                 "encode special-token text in messages as plain text (default: it becomes control tokens)");
    add_sampling_options(app, o);
}

void add_prefix_cache_option(CLI::App& app, bool& on) {
    app.add_flag("--prefix-cache,!--no-prefix-cache", on,
                 "start each turn from the state the last one kept instead of prefilling the whole "
                 "conversation again (the same output either way; the default)");
}

int run_once(Options& o) {
    o.reasoning_first = o.thinking;
    install_interrupt_handler();
    auto engine = start_engine(o);
    if (!engine) return fail(engine.error().message);
    const Tokenizer* tok = (*engine)->tokenizer();
    if (!tok) return fail("run needs a tokenizer.json in the model directory");
    std::vector<ChatMessage> msgs;
    if (!o.system.empty()) msgs.push_back(message("system", o.system));
    msgs.push_back(message("user", o.prompt));
    auto prompt = encode_turns(*tok, msgs, o);
    if (!prompt) return fail(prompt.error().message);
    auto r = stream_generation(**engine, *prompt, o);
    if (!r) return fail(r.error().message);
    std::printf("\n");
    if (o.stats) std::fprintf(stderr, "(%s)\n", stats_line(*r).c_str());
    return 0;
}

int run_chat(Options& o) {
    o.reasoning_first = o.thinking;
    install_interrupt_handler();
    auto engine = start_engine(o);
    if (!engine) return fail(engine.error().message);
    const Tokenizer* tok = (*engine)->tokenizer();
    if (!tok) return fail("chat needs a tokenizer.json in the model directory");
    std::vector<ChatMessage> history;
    if (!o.system.empty()) history.push_back(message("system", o.system));
    std::fprintf(stderr,
                 "chat: type a message; /reset clears the history; /exit, Ctrl-D or Ctrl-C at the prompt "
                 "quits; Ctrl-C during an answer stops it\n");
    std::string line;
    LineReader reader("> ");
    while (true) {
        interrupt_flag().store(false);
        set_interrupt_restarts(false);  // Ctrl-C ends the read
        const bool got = reader.read(line);
        set_interrupt_restarts(true);
        if (!got) {
            if (interrupt_flag().load()) std::fprintf(stderr, "\n");  // Ctrl-C at the prompt: quit, as Ctrl-D
            break;
        }
        if (line == "/exit" || line == "/quit") break;
        if (line == "/reset") {
            history.resize(o.system.empty() ? 0 : 1);
            std::fprintf(stderr, "(history cleared)\n");
            continue;
        }
        if (line.empty()) continue;
        history.push_back(message("user", line));
        auto prompt = encode_turns(*tok, history, o);
        if (!prompt) return fail(prompt.error().message);
        auto r = stream_generation(**engine, *prompt, o);
        if (!r) return fail(r.error().message);
        std::printf("\n");
        if (r->finish == FinishReason::kCancelled) std::fprintf(stderr, "(stopped)\n");
        if (o.stats) std::fprintf(stderr, "(%s)\n", stats_line(*r).c_str());
        history.push_back(message("assistant", r->text));
    }
    return 0;
}

std::function<int()> setup_run(CLI::App& app) {
    auto o = std::make_shared<Options>();
    app.add_option("--prompt", o->prompt, "the user message")->required();
    add_chat_options(app, *o);
    return [o] { return run_once(*o); };
}

std::function<int()> setup_chat(CLI::App& app) {
    auto o = std::make_shared<Options>();
    add_chat_options(app, *o);
    o->prefix_cache = true;
    add_prefix_cache_option(app, o->prefix_cache);
    return [o] { return run_chat(*o); };
}

}  // namespace

DI_COMMAND("run", "Answer one chat message (built-in demo model when no --model)", setup_run);
DI_COMMAND("chat", "Interactive chat with history (built-in demo model when no --model)", setup_chat);

}  // namespace di::cli
