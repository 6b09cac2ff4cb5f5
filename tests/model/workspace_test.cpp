// The step arena: a rewound layer's memory goes to the next layer, blocks kept from before a rewind are
// reused, and reset() sizes its one block by the most held at once, not by everything ever taken.
#include "model/workspace.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "demo/demo_model.h"
#include "model/model.h"
#include "runtime/backend_factory.h"
#include "runtime/model_loader.h"

namespace di::model {
namespace {

constexpr int64_t kMiB = int64_t(1) << 20;

TEST(Workspace, RewindHandsTheSameMemoryToTheNextLayer) {
    Workspace ws(host_allocator());
    ws.reset();
    const TensorView step = ws.take(DType::kU8, {kMiB / 4});
    const Workspace::Mark layer = ws.mark();
    const TensorView a = ws.take(DType::kF32, {1000});
    const TensorView b = ws.take(DType::kU8, {3});
    EXPECT_GT(ws.used(), layer.used);
    ws.rewind(layer);
    EXPECT_EQ(ws.used(), layer.used);
    const TensorView a2 = ws.take(DType::kF32, {1000});
    const TensorView b2 = ws.take(DType::kU8, {3});
    EXPECT_EQ(a2.data, a.data);
    EXPECT_EQ(b2.data, b.data);
    EXPECT_NE(a.data, step.data);  // the step's buffer stays its own
    EXPECT_EQ(ws.peak(), ws.used());
}

TEST(Workspace, OverflowBlocksAreReusedAfterARewindAndResetSizesByThePeak) {
    Workspace ws(host_allocator());
    ws.reset();
    const TensorView step = ws.take(DType::kU8, {kMiB});  // the first block, full
    const Workspace::Mark layer = ws.mark();
    const uint64_t g0 = ws.generation();
    const TensorView big = ws.take(DType::kU8, {2 * kMiB});  // a block of its own
    EXPECT_EQ(ws.generation(), g0 + 1);
    ws.rewind(layer);
    const TensorView again = ws.take(DType::kU8, {2 * kMiB});  // the kept block, nothing allocated
    EXPECT_EQ(again.data, big.data);
    EXPECT_EQ(ws.generation(), g0 + 1);
    ws.rewind(layer);
    const TensorView larger = ws.take(DType::kU8, {3 * kMiB});  // the kept block is too small: a new one
    EXPECT_NE(larger.data, big.data);
    EXPECT_EQ(ws.generation(), g0 + 2);
    ws.rewind(layer);
    EXPECT_EQ(ws.peak(), size_t(4 * kMiB));  // the step's 1 MiB and the 3 MiB layer, never all three

    ws.reset();  // one block of the peak: the same takes fit it with no new block
    EXPECT_EQ(ws.capacity(), size_t(4 * kMiB));
    const uint64_t g1 = ws.generation();
    const TensorView s2 = ws.take(DType::kU8, {kMiB});
    const Workspace::Mark l2 = ws.mark();
    const TensorView x = ws.take(DType::kU8, {2 * kMiB});
    ws.rewind(l2);
    const TensorView y = ws.take(DType::kU8, {3 * kMiB});
    EXPECT_EQ(ws.generation(), g1);
    EXPECT_EQ(static_cast<char*>(x.data), static_cast<char*>(s2.data) + kMiB);
    EXPECT_EQ(y.data, x.data);
    EXPECT_NE(step.data, nullptr);
}

// The activations a step holds do not grow with the depth: a model of the demo's four layer kinds twice
// over holds what one of them holds after the same prefill (each layer's buffers are free after it).
size_t workspace_after_prefill(const std::vector<int>& compress_ratios) {
    demo::RandomModelSpec spec;
    spec.vocab = 512;
    spec.compress_ratios = compress_ratios;
    auto rm = demo::random_model_in_memory(spec);
    EXPECT_TRUE(rm.ok());
    auto be = runtime::make_backend("cpu");
    EXPECT_TRUE(be.ok());
    auto m = runtime::load_model_in_memory(rm->config_json, rm->checkpoint, **be);
    EXPECT_TRUE(m.ok()) << (m.ok() ? "" : m.error().message);
    auto st = (*m)->new_state(256);
    std::vector<int32_t> prompt(200);
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t(i * 7 % 512);
    const SeqChunk c{st.get(), prompt, false};
    (*m)->forward({&c, 1});
    return (*m)->workspace_bytes();
}

TEST(Workspace, AStepHoldsOneLayersActivationsWhateverTheDepth) {
    const size_t four = workspace_after_prefill({0, 4, 128, 4});
    const size_t eight = workspace_after_prefill({0, 4, 128, 4, 0, 4, 128, 4});
    EXPECT_GT(four, size_t(0));
    EXPECT_EQ(eight, four);
}

}  // namespace
}  // namespace di::model
