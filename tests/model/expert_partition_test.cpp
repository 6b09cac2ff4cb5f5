// Expert parallelism's partition and loading by shard: the ranks' blocks cover every expert once, and a
// rank's weights hold only its own experts (the others validated by name, shape and dtype, left empty),
// everything else as the whole model binds it.
#include "model/expert_partition.h"

#include <gtest/gtest.h>

#include "io/safetensors.h"
#include "model/weights.h"
#include "ops/ref/ref_backend.h"

namespace di::model {
namespace {

TEST(ExpertPartition, BlocksCoverEveryExpertOnce) {
    for (auto [E, n] :
         {std::pair<int64_t, int>{256, 2}, {256, 8}, {8, 3}, {7, 7}, {5, 1}, {256, 3}, {10, 4}}) {
        std::vector<int> owner(size_t(E), -1);
        for (int r = 0; r < n; ++r) {
            const ExpertPartition p{.rank = r, .size = n};
            EXPECT_LE(p.first(E), p.end(E));
            for (int64_t e = 0; e < E; ++e)
                if (p.owns(e, E)) {
                    EXPECT_EQ(owner[size_t(e)], -1) << "expert " << e << " of " << E << " owned twice";
                    owner[size_t(e)] = r;
                }
        }
        for (int64_t e = 0; e < E; ++e) {
            EXPECT_NE(owner[size_t(e)], -1) << "expert " << e << " of " << E;
            EXPECT_EQ((ExpertPartition{.rank = 0, .size = n}.owner(e, E)), owner[size_t(e)])
                << "expert " << e << " of " << E << " on " << n << " ranks";
        }
    }
    EXPECT_EQ((ExpertPartition{.rank = 1, .size = 2}.first(256)), 128);
}

TEST(ExpertPartition, ARankBindsOnlyItsExperts) {
    const std::string dir = std::string(DI_TEST_DATA) + "/v4_tiny_fp8";
    auto cfg = load_config(dir);
    ASSERT_TRUE(cfg.ok()) << cfg.error().message;
    auto ckpt = io::Checkpoint::open(dir);
    ASSERT_TRUE(ckpt.ok()) << ckpt.error().message;
    auto shared = std::make_shared<io::Checkpoint>(std::move(ckpt.value()));
    auto be = ops::make_ref_backend();
    auto whole = bind_weights(shared, *cfg, *be);
    ASSERT_TRUE(whole.ok()) << whole.error().message;
    const int64_t E = cfg->n_experts;
    for (int rank = 0; rank < 2; ++rank) {
        const ExpertPartition part{.rank = rank, .size = 2};
        auto mine = bind_weights(shared, *cfg, *be, part);
        ASSERT_TRUE(mine.ok()) << mine.error().message;
        ASSERT_EQ(mine->layers.size(), whole->layers.size());
        for (size_t l = 0; l < mine->layers.size(); ++l) {
            const auto& ex = mine->layers[l].ffn.experts;
            ASSERT_EQ(int64_t(ex.size()), E);
            for (int64_t e = 0; e < E; ++e) {
                const auto& want = whole->layers[l].ffn.experts[size_t(e)];
                if (part.owns(e, E)) {
                    EXPECT_EQ(ex[size_t(e)].w1.data.data, want.w1.data.data)
                        << "layer " << l << " expert " << e;
                    EXPECT_EQ(ex[size_t(e)].w2.scale.data, want.w2.scale.data);
                } else {
                    EXPECT_TRUE(ex[size_t(e)].w1.empty() && ex[size_t(e)].w2.empty() &&
                                ex[size_t(e)].w3.empty())
                        << "rank " << rank << " holds expert " << e << " of layer " << l;
                }
            }
            EXPECT_EQ(mine->layers[l].ffn.shared.w1.data.data, whole->layers[l].ffn.shared.w1.data.data);
        }
        EXPECT_EQ(mine->head.data.data, whole->head.data.data);
    }
}

}  // namespace
}  // namespace di::model
