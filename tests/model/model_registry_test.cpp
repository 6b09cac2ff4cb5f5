// The model registry: a config finds its architecture by name or model_type, an unknown one is refused
// naming what is known, and a loaded model's states are the size its family's formula says.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "model/registry.h"
#include "runtime/backend_factory.h"
#include "runtime/model_loader.h"

namespace di::model {
namespace {

using nlohmann::json;

TEST(ModelRegistry, FindsTheArchitectureByNameThenModelType) {
    auto by_arch = find_architecture(json{{"architectures", {"Other", "DeepseekV4ForCausalLM"}}}, "c.json");
    ASSERT_TRUE(by_arch.ok()) << by_arch.error().message;
    EXPECT_EQ(by_arch->architecture, "DeepseekV4ForCausalLM");
    auto by_type = find_architecture(json{{"model_type", "deepseek_v4"}}, "c.json");
    ASSERT_TRUE(by_type.ok()) << by_type.error().message;
    EXPECT_EQ(by_type->architecture, "DeepseekV4ForCausalLM");
    auto unknown =
        find_architecture(json{{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}}, "c.json");
    ASSERT_FALSE(unknown.ok());
    for (const char* part :
         {"c.json", "unknown architecture", "LlamaForCausalLM", "llama", "DeepseekV4ForCausalLM"})
        EXPECT_NE(unknown.error().message.find(part), std::string::npos) << unknown.error().message;
    EXPECT_FALSE(
        find_architecture(json{{"architectures", "DeepseekV4ForCausalLM"}}, "c.json").ok());  // no list
}

TEST(ModelRegistry, EveryArchitectureHasAFamily) {
    for (const ArchitectureName& a : kArchitectures) {
        ModelConfig c;
        c.architecture = std::string(a.architecture);
        EXPECT_EQ(family_of(c).architecture, a.architecture);
    }
    EXPECT_EQ(model_families().size(), std::size(kArchitectures));
}

TEST(ModelRegistry, LoadedModelStatesMatchTheFamilyFormula) {
    auto be = runtime::make_backend("ref");
    ASSERT_TRUE(be.ok());
    auto m = runtime::load_model(std::string(DI_TEST_DATA) + "/v4_tiny_fp32", **be);
    ASSERT_TRUE(m.ok()) << m.error().message;
    const Model& model = **m;
    EXPECT_EQ(&family_of(model.config()), &model_families()[0]);
    const StateSize formula = state_size(model.config());
    EXPECT_EQ(formula.fixed_bytes, model.state_size().fixed_bytes);
    // Capacities that are multiples of every compress rate hold exactly the amortised entries; others less.
    for (int64_t capacity : {128, 256, 1000, 1}) {
        const std::unique_ptr<SequenceState> st = (*m)->new_state(capacity);
        EXPECT_EQ(st->capacity(), capacity);
        EXPECT_EQ(st->n_tokens(), 0);
        if (capacity % 128 == 0)
            EXPECT_EQ(st->bytes(), formula.bytes_for(capacity)) << capacity;
        else
            EXPECT_LE(st->bytes(), formula.bytes_for(capacity)) << capacity;
    }
}

}  // namespace
}  // namespace di::model
