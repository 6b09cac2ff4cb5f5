#include "runtime/model_loader.h"

#include <algorithm>
#include <chrono>
#include <tuple>

#include "io/finite_scan.h"
#include "io/safetensors.h"
#include "model/expert_parallel_model.h"
#include "model/registry.h"
#include "parallel/communicator.h"
#include "runtime/backend_factory.h"
#ifdef DEEPINFER_WITH_CUDA
#include "parallel/nccl/nccl_group.h"
#endif

namespace di::runtime {

namespace {

// Collectives of a healthy step take microseconds; a peer silent for this long has failed.
constexpr auto kCollectiveTimeout = std::chrono::minutes(5);

// The ranks' communicators: threads exchanging host memory for host backends, NCCL over GPUs 0 .. ranks - 1
// for cuda.
Result<std::vector<std::unique_ptr<parallel::Communicator>>> rank_group(ops::Backend& backend, int ranks) {
    const auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(kCollectiveTimeout);
    if (backend.allocator().device() == Device::kHost) return parallel::make_local_group(ranks, timeout);
#ifdef DEEPINFER_WITH_CUDA
    return parallel::make_nccl_group(ranks, timeout);
#else
    return make_error(ErrorCode::kUnsupported, "expert parallelism on the {} backend needs NCCL",
                      backend.name());
#endif
}

Status check_kernel_limits(const model::ModelConfig& cfg, const ops::Backend& backend,
                           const std::string& source) {
    const ops::KernelLimits lim = backend.kernel_limits();
    for (const auto& [field, value, most] : {std::tuple{"head_dim", cfg.head_dim, lim.head_dim},
                                             std::tuple{"index_topk", cfg.index_topk, lim.index_topk},
                                             std::tuple{"hc_mult", cfg.hc_mult, lim.hc_mult}})
        if (most > 0 && value > most)
            return make_error(ErrorCode::kUnsupported,
                              "{}: field '{}': {} is above what the {} backend's "
                              "kernels take ({})",
                              source, field, value, backend.name(), most);
    return ok_status();
}

// Speculative decoding's settings against the config: the checkpoint has an MTP block, and a step's
// drafts hold at most one window close of each compressor and fit the sliding window's ring (what
// model::DeepseekV4State::undo restores).
Status check_drafts(model::ModelConfig& cfg, int draft_tokens, const std::string& source) {
    if (draft_tokens == 0) return ok_status();
    if (draft_tokens < 0 || draft_tokens > kMaxDraftTokens)
        return make_error(ErrorCode::kInvalidArgument,
                          "{} draft tokens a step: the MTP drafter takes 1 to {}", draft_tokens,
                          kMaxDraftTokens);
    if (cfg.n_mtp_layers < 1)
        return make_error(
            ErrorCode::kUnsupported,
            "{}: field 'num_nextn_predict_layers' is 0: the checkpoint has no MTP block to draft "
            "with (speculative decoding needs one)",
            source);
    const int64_t least_rate = std::min(cfg.csa_rate, cfg.hca_rate);
    if (cfg.window - 1 < draft_tokens + 1 || least_rate < draft_tokens + 1)
        return make_error(ErrorCode::kUnsupported,
                          "{}: speculative decoding of {} draft tokens needs a sliding window above {} and "
                          "compression rates of at least {} (window {}, rates {} and {})",
                          source, draft_tokens, draft_tokens + 1, draft_tokens + 1, cfg.window, cfg.csa_rate,
                          cfg.hca_rate);
    cfg.draft_tokens = draft_tokens;
    return ok_status();
}

// The family's model, or expert_ranks ranks of it (model/expert_parallel_model.h).
Result<std::unique_ptr<model::Model>> load_ranks(model::ModelConfig cfg, std::shared_ptr<io::Checkpoint> ckpt,
                                                 ops::Backend& backend, int expert_ranks, int draft_tokens,
                                                 const std::string& source) {
    DI_TRY_STATUS(check_drafts(cfg, draft_tokens, source));
    if (expert_ranks == 1) {
        const model::ModelFamily& family = model::family_of(cfg);
        return family.load(std::move(cfg), std::move(ckpt), backend);
    }
    if (cfg.architecture != "DeepseekV4ForCausalLM")
        return make_error(ErrorCode::kUnsupported, "{}: expert parallelism is not written for {}", source,
                          cfg.architecture);
    if (expert_ranks < 1 || expert_ranks > cfg.n_experts)
        return make_error(ErrorCode::kInvalidArgument, "{} expert-parallel ranks for {} routed experts",
                          expert_ranks, cfg.n_experts);
    const std::string name(backend.name());
    DI_TRY(auto comms, rank_group(backend, expert_ranks));
    return model::ExpertParallelModel::load(std::move(cfg), std::move(ckpt), backend, std::move(comms),
                                            [&](int rank) { return make_backend_on(name, rank); });
}

}  // namespace

Result<std::unique_ptr<model::Model>> load_model(const std::string& dir, ops::Backend& backend,
                                                 bool check_weights, int expert_ranks, int draft_tokens) {
    DI_TRY(model::ModelConfig cfg, model::load_config(dir));
    DI_TRY_STATUS(check_kernel_limits(cfg, backend, dir + "/config.json"));
    DI_TRY(io::Checkpoint ckpt, io::Checkpoint::open(dir));
    if (check_weights) DI_TRY_STATUS(io::check_checkpoint_finite(ckpt));
    return load_ranks(std::move(cfg), std::make_shared<io::Checkpoint>(std::move(ckpt)), backend,
                      expert_ranks, draft_tokens, dir);
}

Result<std::unique_ptr<model::Model>> load_model_in_memory(const std::string& config_json,
                                                           std::shared_ptr<io::Checkpoint> ckpt,
                                                           ops::Backend& backend, int expert_ranks,
                                                           int draft_tokens) {
    DI_TRY(model::ModelConfig cfg, model::parse_config(config_json, ckpt->dir()));
    DI_TRY_STATUS(check_kernel_limits(cfg, backend, ckpt->dir()));
    const std::string source = ckpt->dir();
    return load_ranks(std::move(cfg), std::move(ckpt), backend, expert_ranks, draft_tokens, source);
}

Result<int> parse_speculative(std::string_view name) {
    if (name == "off") return 0;
    if (name == "mtp") return 1;
    return make_error(ErrorCode::kInvalidArgument, "speculative '{}': expected off or mtp", name);
}

Result<model::Precision> parse_precision(std::string_view name) {
    if (name == "exact") return model::Precision::kExact;
    if (name == "native") return model::Precision::kNative;
    return make_error(ErrorCode::kInvalidArgument, "precision '{}': expected exact or native", name);
}

Status check_tokens(const std::vector<int32_t>& tokens, int64_t vocab_size) {
    for (size_t i = 0; i < tokens.size(); ++i)
        if (tokens[i] < 0 || tokens[i] >= vocab_size)
            return make_error(ErrorCode::kOutOfRange,
                              "token id {} at index {} is outside the vocabulary ({})", tokens[i], i,
                              vocab_size);
    return ok_status();
}

}  // namespace di::runtime
