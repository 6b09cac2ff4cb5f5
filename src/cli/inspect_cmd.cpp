// deepinfer inspect: the parsed config, the layer schedule, tensor statistics, parameter counts, the
// per-sequence state size of a model directory and the backend's kernel variants; text or --json.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "io/mmap_file.h"
#include "model/registry.h"
#include "runtime/backend_factory.h"
#include "runtime/kernels_file.h"
#include "runtime/model_loader.h"

namespace di::cli {
namespace {

std::string human(double bytes) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024 && u < 4) bytes /= 1024, ++u;
    return fmt::format("{:.2f} {}", bytes, units[u]);
}

void print_rope(const char* name, const model::RopeTable& t) {
    fmt::print("  rope {:<8}       {} theta={} partial_rotary_factor={}", name, t.type, t.theta,
               t.partial_rotary_factor);
    if (t.type == "yarn")
        fmt::print(" factor={} original_max_position={} beta_fast={} beta_slow={} attention_factor={}",
                   t.factor, t.original_max_position, t.beta_fast, t.beta_slow,
                   t.has_attention_factor ? fmt::format("{}", t.attention_factor) : std::string("default"));
    fmt::print("\n");
}

// The active allow-list: the built-in one, or --kernels.
Result<ops::AllowList> active_list(ops::Backend& be, const std::string& kernels) {
    if (kernels.empty()) return ops::AllowList::all_of(std::string(be.name()), be.kernel_variants());
    DI_TRY(std::string text, io::read_text_file(kernels));
    return runtime::parse_kernels_file(text, kernels, be);
}

const char* status_of(const ops::KernelVariant& v, const ops::AllowList& list) {
    return v.fallback ? "fallback" : list.allows(v.op, v.name) ? "allowed" : "not allowed";
}

// The backend's kernel variants and whether the active list lets each run.
void print_variants(ops::Backend& be, const ops::AllowList& list, const std::string& kernels) {
    if (const std::string hw = be.hardware(); !hw.empty()) fmt::print("backend {}: {}\n", be.name(), hw);
    fmt::print("kernel variants on {} ({}):\n", be.name(), kernels.empty() ? "built-in list" : kernels);
    std::string op;
    for (const ops::KernelVariant& v : be.kernel_variants()) {
        if (v.op != op) {
            fmt::print("{}  {:<13}", op.empty() ? "" : "\n", v.op + ":");
            op = v.op;
        }
        fmt::print(" {} ({})", v.name, status_of(v, list));
    }
    fmt::print("\n");
}

nlohmann::json json_of(const std::string& dir, const model::ModelConfig& c, const model::WeightStats& s,
                       ops::Backend& be, const ops::AllowList& list, const std::string& kernels) {
    nlohmann::json layers = nlohmann::json::array(), variants = nlohmann::json::array();
    for (int l = 0; l < int(c.n_layers); ++l)
        layers.push_back({{"attention", model::attn_type_name(c.attn_types[size_t(l)])},
                          {"ffn", model::moe_type_name(c.moe_types[size_t(l)])}});
    for (const ops::KernelVariant& v : be.kernel_variants())
        variants.push_back({{"op", v.op},
                            {"variant", v.name},
                            {"status", status_of(v, list)},
                            {"claims", v.claims},
                            {"deterministic", v.deterministic},
                            {"batch_invariant", v.batch_invariant}});
    const model::StateSize st = model::state_size(c);
    return {{"model", dir},
            {"architecture", c.architecture},
            {"config",
             {{"vocab_size", c.vocab_size},
              {"hidden_dim", c.hidden_dim},
              {"n_layers", c.n_layers},
              {"n_heads", c.n_heads},
              {"head_dim", c.head_dim},
              {"rope_dim", c.rope_dim},
              {"q_lora_rank", c.q_lora_rank},
              {"o_groups", c.o_groups},
              {"o_lora_rank", c.o_lora_rank},
              {"window", c.window},
              {"csa_rate", c.csa_rate},
              {"hca_rate", c.hca_rate},
              {"index_heads", c.index_heads},
              {"index_dim", c.index_dim},
              {"index_topk", c.index_topk},
              {"hc_mult", c.hc_mult},
              {"hc_sinkhorn_iters", c.hc_sinkhorn_iters},
              {"hc_eps", c.hc_eps},
              {"n_experts", c.n_experts},
              {"n_experts_active", c.n_experts_active},
              {"moe_dim", c.moe_dim},
              {"score_func", c.score_func == model::ScoreFunc::kSigmoid ? "sigmoid" : "sqrtsoftplus"},
              {"routed_scaling_factor", c.routed_scaling_factor},
              {"swiglu_limit", c.swiglu_limit},
              {"max_position_embeddings", c.max_position_embeddings}}},
            {"layers", layers},
            {"tensors",
             {{"count", s.n_tensors},
              {"skipped", s.skipped_tensors},
              {"skipped_mtp", s.skipped_mtp},
              {"by_dtype", s.tensors_by_dtype}}},
            {"bytes", s.bytes},
            {"params", s.params},
            {"active_params", s.active_params},
            {"state",
             {{"fixed_bytes", st.fixed_bytes},
              {"bytes_per_token", st.bytes_per_token},
              {"bytes_at_4096", st.bytes_for(4096)},
              {"bytes_at_1m", st.bytes_for(1 << 20)}}},
            {"backend", be.name()},
            {"hardware", be.hardware()},
            {"kernels", kernels.empty() ? "built-in list" : kernels},
            {"kernel_variants", variants}};
}

int run_inspect(const std::string& dir, bool check_weights, const std::string& backend_name,
                const std::string& kernels, bool json) {
    auto backend = runtime::make_backend(backend_name);
    if (!backend) return fail(backend.error().message);
    auto model = runtime::load_model(dir, **backend, check_weights);
    if (!model) return fail(model.error().message);
    auto list = active_list(**backend, kernels);
    if (!list) return fail(list.error().message);
    const model::ModelConfig& c = (*model)->config();
    const model::WeightStats& s = (*model)->weight_stats();
    if (json) {
        fmt::print("{}\n", json_of(dir, c, s, **backend, *list, kernels).dump(2));
        return 0;
    }
    fmt::print("model {}\n  architecture       {}\n", dir, c.architecture);
    fmt::print("  vocab_size {}  hidden_dim {}  n_layers {}  n_heads {}  head_dim {}  rope_dim {}\n",
               c.vocab_size, c.hidden_dim, c.n_layers, c.n_heads, c.head_dim, c.rope_dim);
    fmt::print("  q_lora_rank {}  o_groups {}  o_lora_rank {}  window {}  csa_rate {}  hca_rate {}\n",
               c.q_lora_rank, c.o_groups, c.o_lora_rank, c.window, c.csa_rate, c.hca_rate);
    fmt::print("  index_heads {}  index_dim {}  index_topk {}  hc_mult {}  sinkhorn_iters {}  hc_eps {}\n",
               c.index_heads, c.index_dim, c.index_topk, c.hc_mult, c.hc_sinkhorn_iters, c.hc_eps);
    fmt::print(
        "  n_experts {}  n_experts_active {}  moe_dim {}  score_func {}  routed_scaling {}  swiglu_limit "
        "{}\n",
        c.n_experts, c.n_experts_active, c.moe_dim,
        c.score_func == model::ScoreFunc::kSigmoid ? "sigmoid" : "sqrtsoftplus", c.routed_scaling_factor,
        c.swiglu_limit);
    print_rope("main", c.rope_main);
    print_rope("compress", c.rope_compress);
    fmt::print("layers\n");
    for (int l = 0; l < int(c.n_layers); ++l)
        fmt::print("  {:>3}  {:<30} {}\n", l, model::attn_type_name(c.attn_types[size_t(l)]),
                   model::moe_type_name(c.moe_types[size_t(l)]));
    fmt::print("tensors {} ({} skipped)\n", s.n_tensors, s.skipped_tensors);
    if (c.n_mtp_layers > 0)  // what --speculative mtp loads (docs/speculative.md)
        fmt::print("  mtp block: {} tensors{}\n", s.skipped_mtp,
                   s.skipped_mtp > 0
                       ? " (skipped; --speculative mtp loads them as the drafter)"
                       : " (this checkpoint was saved without it: --speculative mtp cannot run)");
    for (const auto& [dt, n] : s.tensors_by_dtype) fmt::print("  {:<8} {}\n", dt, n);
    fmt::print("bytes {} ({})\n", s.bytes, human(double(s.bytes)));
    auto count = [](int64_t n) {
        return n >= 1000000000 ? fmt::format("{:.2f} B", double(n) / 1e9)
                               : fmt::format("{:.2f} M", double(n) / 1e6);
    };
    fmt::print("parameters {} ({}), active per token {} ({})\n", s.params, count(s.params), s.active_params,
               count(s.active_params));
    const model::StateSize st = model::state_size(c);
    fmt::print("sequence state (f32): {} fixed + {:.1f} bytes/token; 4096 tokens: {}, 1M tokens: {}\n",
               human(double(st.fixed_bytes)), st.bytes_per_token, human(double(st.bytes_for(4096))),
               human(double(st.bytes_for(1 << 20))));
    print_variants(**backend, *list, kernels);
    return 0;
}

std::function<int()> setup(CLI::App& app) {
    auto dir = std::make_shared<std::string>();
    auto check = std::make_shared<bool>(false), json = std::make_shared<bool>(false);
    auto backend = std::make_shared<std::string>("auto"), kernels = std::make_shared<std::string>();
    app.add_option("-m,--model,model", *dir, "model directory (config.json + safetensors)")->required();
    app.add_flag("--check-weights", *check, "scan every weight for NaN/infinity (reported as the error)");
    app.add_option("--backend", *backend,
                   "backend whose kernel variants to list (auto (default) | cpu | cuda | ref)")
        ->capture_default_str();
    app.add_option("--kernels", *kernels, "kernel allow-list file to show as active");
    app.add_flag("--json", *json, "print one JSON object instead of text");
    return
        [dir, check, backend, kernels, json] { return run_inspect(*dir, *check, *backend, *kernels, *json); };
}

}  // namespace

DI_COMMAND("inspect", "Print a model's config, layer schedule, tensors, parameters and state size", setup);

}  // namespace di::cli
