// Expert parallelism's partition and loading by shard: the ranks' blocks cover every expert once, and a
// rank's weights hold only its own experts (the others validated by name, shape and dtype, left empty),
// everything else as the whole model binds it; of transformers' fused expert tensors only the rank's block.
#include "model/expert_partition.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "io/safetensors.h"
#include "io/safetensors_writer.h"
#include "model/weights.h"
#include "model_fixture.h"
#include "ops/cpu/cpu_backend.h"
#include "ops/ref/ref_backend.h"
#include "runtime/model_loader.h"

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

// Each of `ranks` ranks binding `dir`: its own experts where the whole binding has them (host memory: views
// into the mapped files), the others empty, every expert still counted; the rest of the weights as the
// whole binding's.
void expect_ranks_bind_only_their_experts(const std::string& dir, int ranks) {
    auto cfg = load_config(dir);
    ASSERT_TRUE(cfg.ok()) << cfg.error().message;
    auto ckpt = io::Checkpoint::open(dir);
    ASSERT_TRUE(ckpt.ok()) << ckpt.error().message;
    auto shared = std::make_shared<io::Checkpoint>(std::move(ckpt.value()));
    auto be = ops::make_ref_backend();
    auto whole = bind_weights(shared, *cfg, *be);
    ASSERT_TRUE(whole.ok()) << whole.error().message;
    const int64_t E = cfg->n_experts;
    for (int rank = 0; rank < ranks; ++rank) {
        const ExpertPartition part{.rank = rank, .size = ranks};
        auto mine = bind_weights(shared, *cfg, *be, part);
        ASSERT_TRUE(mine.ok()) << mine.error().message;
        ASSERT_EQ(mine->layers.size(), whole->layers.size());
        EXPECT_EQ(mine->stats.params, whole->stats.params);  // every expert counted, placed or not
        for (size_t l = 0; l < mine->layers.size(); ++l) {
            const auto& ex = mine->layers[l].ffn.experts;
            ASSERT_EQ(int64_t(ex.size()), E);
            for (int64_t e = 0; e < E; ++e) {
                const auto& got = ex[size_t(e)];
                const auto& want = whole->layers[l].ffn.experts[size_t(e)];
                if (part.owns(e, E)) {
                    EXPECT_EQ(got.w1.data.data, want.w1.data.data) << "layer " << l << " expert " << e;
                    EXPECT_EQ(got.w3.data.data, want.w3.data.data);
                    EXPECT_EQ(got.w2.data.data, want.w2.data.data);
                    EXPECT_EQ(got.w2.scale.data, want.w2.scale.data);
                } else {
                    EXPECT_TRUE(got.w1.empty() && got.w2.empty() && got.w3.empty())
                        << "rank " << rank << " holds expert " << e << " of layer " << l;
                }
            }
            EXPECT_EQ(mine->layers[l].ffn.shared.w1.data.data, whole->layers[l].ffn.shared.w1.data.data);
        }
        EXPECT_EQ(mine->head.data.data, whole->head.data.data);
    }
}

TEST(ExpertPartition, ARankBindsOnlyItsExperts) {
    expect_ranks_bind_only_their_experts(std::string(DI_TEST_DATA) + "/v4_tiny_fp8", 2);
}

// v4_tiny_fp32 rewritten with transformers' fused expert tensors (gate_up_proj [E, 2I, D] = w1 then w3 of
// each expert, down_proj [E, D, I]) into `dir`.
void write_fused_fixture(const std::string& dir) {
    const std::string src = std::string(DI_TEST_DATA) + "/v4_tiny_fp32";
    std::filesystem::create_directories(dir);
    std::filesystem::copy_file(src + "/config.json", dir + "/config.json",
                               std::filesystem::copy_options::overwrite_existing);
    auto ck = io::Checkpoint::open(src);
    ASSERT_TRUE(ck.ok()) << ck.error().message;
    auto cfg = load_config(src);
    ASSERT_TRUE(cfg.ok());
    const int64_t E = cfg->n_experts, I = cfg->moe_dim, D = cfg->hidden_dim;
    std::vector<io::TensorToWrite> out;
    for (const auto& [name, e] : ck->tensors())
        if (name.find(".ffn.experts.") == std::string::npos)
            out.push_back({name, e.st_dtype, e.shape, std::vector<uint8_t>(e.data, e.data + e.nbytes)});
    for (int64_t l = 0; l < cfg->n_layers; ++l) {
        io::TensorToWrite gu{
            fmt::format("model.layers.{}.mlp.experts.gate_up_proj", l), "F32", {E, 2 * I, D}, {}};
        io::TensorToWrite dn{fmt::format("model.layers.{}.mlp.experts.down_proj", l), "F32", {E, D, I}, {}};
        for (int64_t x = 0; x < E; ++x) {
            auto add = [&](io::TensorToWrite& t, const char* w) {
                const io::TensorEntry* e =
                    ck->find(fmt::format("model.layers.{}.ffn.experts.{}.{}.weight", l, x, w));
                ASSERT_NE(e, nullptr) << "layer " << l << " expert " << x << " " << w;
                t.bytes.insert(t.bytes.end(), e->data, e->data + e->nbytes);
            };
            add(gu, "w1"), add(gu, "w3"), add(dn, "w2");
        }
        out.push_back(std::move(gu)), out.push_back(std::move(dn));
    }
    const Status st = io::write_safetensors(dir + "/model.safetensors", out);
    ASSERT_TRUE(st.ok()) << st.error().message;
}

// A fused checkpoint binds each rank's block of experts only (its views inside the fused tensors at that
// block, the other experts empty), and gives the per-expert checkpoint's logits, with one rank and two.
TEST(ExpertPartition, FusedExpertsPlaceOnlyTheRanksBlock) {
    const std::string dir = (std::filesystem::temp_directory_path() / "deepinfer-fused-experts").string();
    write_fused_fixture(dir);
    if (HasFatalFailure()) return;
    expect_ranks_bind_only_their_experts(dir, 3);
    const test::Fixture fx = test::load_fixture("v4_tiny_fp32");
    auto cpu = ops::make_cpu_backend(1);
    auto per_expert = runtime::load_model(std::string(DI_TEST_DATA) + "/v4_tiny_fp32", *cpu);
    ASSERT_TRUE(per_expert.ok()) << per_expert.error().message;
    const std::vector<float> want = test::run_chunked(**per_expert, fx.prompt, {int64_t(fx.prompt.size())});
    for (const int ranks : {1, 2}) {
        auto m = runtime::load_model(dir, *cpu, false, ranks);
        ASSERT_TRUE(m.ok()) << m.error().message;
        const std::vector<float> got = test::run_chunked(**m, fx.prompt, {int64_t(fx.prompt.size())});
        ASSERT_EQ(got.size(), want.size());
        EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * sizeof(float))) << ranks << " ranks";
    }
    std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace di::model
