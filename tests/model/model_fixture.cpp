#include "model_fixture.h"

#include <gtest/gtest.h>

#include <cmath>

#include "io/npy.h"
#include "io/token_list.h"
#include "runtime/backend_factory.h"
#include "runtime/model_loader.h"

namespace di::test {

Fixture load_fixture(const std::string& name) {
    Fixture f;
    f.dir = std::string(DI_TEST_DATA) + "/" + name;
    auto be = runtime::make_backend("ref");
    EXPECT_TRUE(be.ok());
    f.backend = std::move(*be);
    auto m = runtime::load_model(f.dir, *f.backend);
    EXPECT_TRUE(m.ok()) << (m.ok() ? "" : m.error().message);
    if (m.ok()) f.model = std::move(*m);
    auto toks = io::read_token_file(f.dir + "/prompt.txt");
    EXPECT_TRUE(toks.ok());
    if (toks.ok()) f.prompt = *toks;
    return f;
}

std::vector<float> read_logits(const std::string& path, int64_t* rows, int64_t* cols) {
    auto a = io::read_npy(path);
    EXPECT_TRUE(a.ok()) << (a.ok() ? "" : a.error().message);
    if (!a.ok()) return {};
    if (rows) *rows = a->shape[0];
    if (cols) *cols = a->shape[1];
    return a->f32;
}

std::vector<float> run_chunked(model::Model& m, const std::vector<int32_t>& tokens,
                               const std::vector<int64_t>& chunk_lengths) {
    const std::unique_ptr<model::SequenceState> st = m.new_state(int64_t(tokens.size()));
    std::vector<float> out;
    size_t i = 0, k = 0;
    while (i < tokens.size()) {
        const size_t len =
            std::min<size_t>(size_t(chunk_lengths[k++ % chunk_lengths.size()]), tokens.size() - i);
        model::SeqChunk c{st.get(), std::span<const int32_t>(tokens.data() + i, len), true};
        auto part = m.forward(std::span<const model::SeqChunk>(&c, 1));
        out.insert(out.end(), part.begin(), part.end());
        i += len;
    }
    return out;
}

float max_abs(const std::vector<float>& v) {
    float m = 0;
    for (float x : v) m = std::max(m, std::fabs(x));
    return m;
}

}  // namespace di::test
