// Runs the deepinfer binary (DI_BINARY) with arguments, for the CLI tests: exit code, stdout, stderr.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace di::test {

struct CliRun {
    int rc = -1;
    std::string out, err;
};

inline CliRun run_cli(const std::string& args) {
    namespace fs = std::filesystem;
    static int calls = 0;
    const fs::path err_file = fs::temp_directory_path() / ("di_cli_" + std::to_string(::getpid()) + "_" +
                                                           std::to_string(calls++) + ".err");
    const std::string cmd = std::string(DI_BINARY) + " " + args + " 2>" + err_file.string();
    CliRun r;
    FILE* p = popen(cmd.c_str(), "r");
    char buf[4096];
    while (size_t n = fread(buf, 1, sizeof buf, p)) r.out.append(buf, n);
    const int status = pclose(p);
    r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    std::ifstream e(err_file);
    r.err.assign(std::istreambuf_iterator<char>(e), {});
    fs::remove(err_file);
    return r;
}

}  // namespace di::test
