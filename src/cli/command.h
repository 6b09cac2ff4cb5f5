// Subcommand registry: each cli/*_cmd.cpp registers itself with DI_COMMAND, so adding a command touches
// one file only. A command's run() returns the process exit code.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace di::cli {

struct Command {
    std::string name;
    std::string help;
    // Declares options on `sub`, returns the action to run after parsing.
    std::function<std::function<int()>(CLI::App& sub)> setup;
};

std::vector<Command>& commands();

struct CommandRegistrar {
    explicit CommandRegistrar(Command c) { commands().push_back(std::move(c)); }
};

// Prints "deepinfer: <message>" to stderr and returns exit code 1.
int fail(const std::string& message);

}  // namespace di::cli

#define DI_COMMAND_CONCAT_(a, b) a##b
#define DI_COMMAND_NAME_(line) DI_COMMAND_CONCAT_(di_command_, line)
#define DI_COMMAND(name, help, setup_fn) \
    static ::di::cli::CommandRegistrar DI_COMMAND_NAME_(__LINE__)(::di::cli::Command{name, help, setup_fn})
