// deepinfer command line: dispatches to the registered subcommands (cli/*_cmd.cpp).
#include <algorithm>
#include <cstdio>
#include <string_view>

#include "cli/command.h"
#include "runtime/grammar.h"

namespace di::cli {

std::vector<Command>& commands() {
    static std::vector<Command> list;
    return list;
}

int fail(const std::string& message) {
    std::fprintf(stderr, "deepinfer: %s\n", message.c_str());
    return 1;
}

}  // namespace di::cli

int main(int argc, char** argv) {
    // The server's grammar compiler runs as this program in a helper process (runtime/grammar.h); not a
    // subcommand users see.
    if (argc >= 2 && std::string_view(argv[1]) == "__grammar-worker")
        return di::runtime::grammar_worker_main(argc, argv);
    CLI::App app{"deepinfer: DeepSeek-V4 inference engine"};
    app.set_version_flag("--version", std::string("deepinfer ") + DEEPINFER_VERSION);
    app.require_subcommand(1);
    auto& cmds = di::cli::commands();
    std::sort(cmds.begin(), cmds.end(), [](auto& a, auto& b) { return a.name < b.name; });
    std::function<int()> action;
    for (auto& c : cmds) {
        CLI::App* sub = app.add_subcommand(c.name, c.help);
        auto run = c.setup(*sub);
        sub->callback([&action, run] { action = run; });
    }
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e) == 0 ? 0 : 2;
    }
    return action ? action() : 2;
}
