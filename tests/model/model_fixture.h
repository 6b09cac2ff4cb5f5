// Loading of the golden fixtures in tests/data/v4_* (written by tools/make_fixtures.py with transformers).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/model.h"
#include "ops/backend.h"

namespace di::test {

struct Fixture {
    std::string dir;
    std::unique_ptr<ops::Backend> backend;
    std::unique_ptr<model::Model> model;
    std::vector<int32_t> prompt;
};

// Loads tests/data/<name> on the ref backend; fails the current test on error.
Fixture load_fixture(const std::string& name);
std::vector<float> read_logits(const std::string& path, int64_t* rows = nullptr, int64_t* cols = nullptr);
// Runs `tokens` in chunks of the given lengths (cycled) and returns all logits.
std::vector<float> run_chunked(model::Model& m, const std::vector<int32_t>& tokens,
                               const std::vector<int64_t>& chunk_lengths);
float max_abs(const std::vector<float>& v);

}  // namespace di::test
