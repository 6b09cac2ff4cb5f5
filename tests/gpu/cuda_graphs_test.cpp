// CUDA graph replay of the step's segments (Backend::segment_begin) gives the logits of eager execution bit
// for bit: a prefill, then decode steps across compressor boundaries and the window, alone and two
// sequences at once; and replay really happened.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>

#include "model/model.h"
#include "ops/backend.h"
#include "ops/cuda/cuda_backend.h"
#include "runtime/backend_factory.h"
#include "runtime/model_loader.h"

namespace di {
namespace {

std::string data_dir() {
    const char* env =
        std::getenv("DEEPINFER_TEST_DATA");  // the GPU machine runs a copy of the tree elsewhere
    return env ? env : DI_TEST_DATA;
}

std::vector<int32_t> prompt(const std::string& dir) {
    std::ifstream f(dir + "/prompt.txt");
    return {std::istream_iterator<int32_t>(f), std::istream_iterator<int32_t>()};
}

struct Run {
    std::unique_ptr<ops::Backend> be;
    std::unique_ptr<model::Model> m;
};

Run load(const std::string& dir, bool graphs, model::Precision p) {
    Run r;
    auto be = runtime::make_backend("cuda");
    if (!be) {
        ADD_FAILURE() << be.error().message;
        return r;
    }
    r.be = std::move(*be);
    r.be->set_graphs(graphs);
    auto m = runtime::load_model(dir, *r.be);
    if (!m) {
        ADD_FAILURE() << m.error().message;
        return r;
    }
    r.m = std::move(*m);
    r.m->set_precision(p);
    return r;
}

// Every step's logits of: sequence A's prompt in one chunk, then `steps` decode steps of A (and of B, a
// second sequence started from A's first 7 tokens, when `two`), teacher-forced by the prompt's tokens.
std::vector<std::vector<float>> trace(Run& r, const std::vector<int32_t>& tokens, int steps, bool two) {
    const std::unique_ptr<model::SequenceState> a = r.m->new_state(512), b = r.m->new_state(512);
    std::vector<std::vector<float>> out;
    const std::span<const int32_t> all(tokens);
    model::SeqChunk first[] = {{a.get(), all.subspan(0, 40), false}, {b.get(), all.subspan(0, 7), false}};
    out.push_back(r.m->forward(std::span(first, two ? 2 : 1)));
    for (int t = 0; t < steps; ++t) {
        const size_t i = size_t(t) % tokens.size();
        model::SeqChunk step[] = {{a.get(), all.subspan(i, 1), false},
                                  {b.get(), all.subspan((i + 5) % tokens.size(), 1), false}};
        out.push_back(r.m->forward(std::span(step, two ? 2 : 1)));
    }
    return out;
}

void expect_replay_equals_eager(const char* fixture, model::Precision p, bool two) {
    if (ops::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
    const std::string dir = data_dir() + "/" + fixture;
    const std::vector<int32_t> tokens = prompt(dir);
    ASSERT_GE(tokens.size(), 40u);
    Run eager = load(dir, false, p), graphs = load(dir, true, p);
    ASSERT_TRUE(eager.m && graphs.m);
    const auto want = trace(eager, tokens, 48, two);
    const auto got = trace(graphs, tokens, 48, two);
    ASSERT_EQ(want.size(), got.size());
    for (size_t s = 0; s < want.size(); ++s) {
        ASSERT_EQ(want[s].size(), got[s].size());
        EXPECT_EQ(0, std::memcmp(want[s].data(), got[s].data(), want[s].size() * sizeof(float)))
            << fixture << ": step " << s << " differs with graph replay";
    }
    EXPECT_EQ(eager.be->dispatch_count("graph", "replay"), 0);
    // Steps 0 and 1 see a decode key first and second (eager, capture); from then on every segment replays.
    const int64_t segments = int64_t(eager.m->config().n_layers) + 1;
    EXPECT_GE(graphs.be->dispatch_count("graph", "replay"), segments * 40) << "graphs were not replayed";
    EXPECT_EQ(graphs.be->dispatch_count("graph", "interrupted"), 0);
    // A replay adds the launches it holds to the dispatch counts, as eager execution does.
    EXPECT_EQ(graphs.be->dispatch_count("rms_norm", "cuda"), eager.be->dispatch_count("rms_norm", "cuda"));
    EXPECT_EQ(graphs.be->dispatch_count("moe", "split_rows") + graphs.be->dispatch_count("moe", "grouped"),
              eager.be->dispatch_count("moe", "split_rows") + eager.be->dispatch_count("moe", "grouped"));
}

TEST(CudaGraphs, DecodeReplayEqualsEagerFp8) {
    expect_replay_equals_eager("v4_tiny_fp8", model::Precision::kExact, false);
}
TEST(CudaGraphs, DecodeReplayEqualsEagerBf16) {
    expect_replay_equals_eager("v4_tiny_bf16", model::Precision::kExact, false);
}
TEST(CudaGraphs, TwoSequencesReplayEqualsEager) {
    expect_replay_equals_eager("v4_tiny_fp8", model::Precision::kExact, true);
}
TEST(CudaGraphs, NativePrecisionReplayEqualsEager) {
    expect_replay_equals_eager("v4_tiny_fp8", model::Precision::kNative, true);
}

}  // namespace
}  // namespace di
