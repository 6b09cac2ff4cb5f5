// deepinfer generate: raw continuation of a prompt (text or token ids), streamed.
#include <cstdio>

#include "cli/command.h"
#include "cli/generate_common.h"
#include "io/token_list.h"

namespace di::cli {
namespace {

struct Options : GenOptions {
    std::string prompt, tokens;
};

int run_generate(Options& o) {
    if (o.prompt.empty() == o.tokens.empty())
        return fail("generate: give exactly one of --prompt or --tokens");
    if (o.output != "text" && o.output != "ids" && o.output != "jsonl")
        return fail("--output must be text, ids or jsonl, not '" + o.output + "'");
    install_interrupt_handler();
    auto engine = start_engine(o);
    if (!engine) return fail(engine.error().message);
    const Tokenizer* tok = (*engine)->tokenizer();
    std::vector<int32_t> prompt;
    if (!o.tokens.empty()) {
        auto ids = io::parse_token_list(o.tokens, "--tokens");
        if (!ids) return fail(ids.error().message);
        prompt = *ids;
    } else {
        if (!tok)
            return fail("--prompt needs a tokenizer.json in the model directory; give --tokens instead");
        prompt = tok->encode(o.prompt);
    }
    auto r = stream_generation(**engine, prompt, o);
    if (!r) return fail(r.error().message);
    if (o.output == "text") std::printf("\n");
    if (o.stats) std::fprintf(stderr, "(%s)\n", stats_line(*r).c_str());
    return 0;
}

std::function<int()> setup(CLI::App& app) {
    auto o = std::make_shared<Options>();
    add_model_options(app, *o);
    add_speculative_option(app, o->speculative);
    app.add_option("--prompt", o->prompt, "prompt text (tokenized with the model's tokenizer)");
    app.add_option("--tokens", o->tokens, "prompt token ids, comma separated");
    add_sampling_options(app, *o);
    app.add_option("--output", o->output, "text | ids (one JSON array) | jsonl (one object per token)");
    return [o] { return run_generate(*o); };
}

}  // namespace

DI_COMMAND("generate", "Continue a prompt (raw completion), streaming the tokens", setup);

}  // namespace di::cli
