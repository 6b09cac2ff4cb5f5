// Tokenizer encode throughput, one thread: MB/s of deepinfer's encode on a text file (default: English-heavy
// and mixed texts built from the committed corpus). Compare with tools/tokenizer_bench_hf.py on the same file
// and machine (bench/run_tokenizer_bench.sh runs both).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "deepinfer/tokenizer.h"

namespace {

std::string read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::ostringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: tokenizer_bench TOKENIZER_DIR TEXT_FILE [REPEATS] [whole|lines]\n");
        return 2;
    }
    auto t0 = std::chrono::steady_clock::now();
    auto tok = di::Tokenizer::load(argv[1]);
    if (!tok) {
        std::fprintf(stderr, "%s\n", tok.error().message.c_str());
        return 1;
    }
    const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const std::string text = read_file(argv[2]);
    const int repeats = argc > 3 ? std::atoi(argv[3]) : 5;
    const bool lines = argc > 4 && std::string(argv[4]) == "lines";
    // "lines": one encode call per line (newline kept), like a server handling many short requests.
    std::vector<std::string_view> units;
    if (lines) {
        size_t start = 0;
        for (size_t i = 0; i < text.size(); ++i)
            if (text[i] == '\n') {
                units.push_back(std::string_view(text).substr(start, i + 1 - start));
                start = i + 1;
            }
        if (start < text.size()) units.push_back(std::string_view(text).substr(start));
    } else {
        units.push_back(text);
    }
    double best = 1e30;
    size_t n_ids = 0;
    for (int r = 0; r < repeats; ++r) {
        t0 = std::chrono::steady_clock::now();
        n_ids = 0;
        for (std::string_view u : units) n_ids += tok->encode(u, false).size();
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::printf(
        "deepinfer encode (%s): %s %zu bytes -> %zu ids, best of %d: %.3f s = %.2f MB/s (load %.2f s)\n",
        lines ? "per line" : "whole text", argv[2], text.size(), n_ids, repeats, best,
        text.size() / best / 1e6, load_s);
    return 0;
}
