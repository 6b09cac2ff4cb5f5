#include "model/expert_parallel_model.h"

#include <chrono>

#include "core/check.h"

namespace di::model {
namespace {

// A sequence's state on every rank (each rank keeps its own attention state: attention is replicated).
class RanksState final : public SequenceState {
  public:
    RanksState(std::vector<std::unique_ptr<SequenceState>> parts, int64_t capacity)
        : SequenceState(capacity), parts_(std::move(parts)) {
        for (const auto& p : parts_) bytes_ += p->bytes();
    }
    SequenceState* part(size_t r) { return parts_[r].get(); }
    void reset() override {
        n_tokens_ = 0;
        for (auto& p : parts_) p->reset();
    }
    void fill_synthetic(int64_t n_tokens, uint32_t seed) override {
        for (auto& p : parts_) p->fill_synthetic(n_tokens, seed);  // the same on every rank
        n_tokens_ = n_tokens;
    }

  private:
    std::vector<std::unique_ptr<SequenceState>> parts_;
};

// Collectives of a healthy step take microseconds; a peer silent for this long has failed.
constexpr auto kCollectiveTimeout = std::chrono::minutes(5);

}  // namespace

Result<std::unique_ptr<Model>> ExpertParallelModel::load(
    ModelConfig cfg, std::shared_ptr<io::Checkpoint> ckpt, ops::Backend& backend, int ranks,
    const std::function<Result<std::unique_ptr<ops::Backend>>()>& make_backend) {
    if (ranks < 1 || ranks > cfg.n_experts)
        return make_error(ErrorCode::kInvalidArgument, "{} expert-parallel ranks for {} routed experts",
                          ranks, cfg.n_experts);
    std::unique_ptr<ExpertParallelModel> m(new ExpertParallelModel());
    m->comms_ = parallel::make_local_group(
        ranks, std::chrono::duration_cast<std::chrono::milliseconds>(kCollectiveTimeout));
    for (int r = 0; r < ranks; ++r) {
        ops::Backend* be = &backend;
        if (r > 0) {
            DI_TRY(std::unique_ptr<ops::Backend> own, make_backend());
            m->backends_.push_back(std::move(own));
            be = m->backends_.back().get();
        }
        if (be->allocator().device() != Device::kHost)
            return make_error(
                ErrorCode::kUnsupported,
                "expert parallelism runs on host backends only so far (the {} backend needs the "
                "NCCL communicator)",
                be->name());
        const ExpertPartition part{.rank = r, .size = ranks};
        DI_TRY(ModelWeights w, bind_weights(ckpt, cfg, *be, part));
        m->ranks_.push_back(std::make_unique<DeepseekV4>(cfg, std::move(w), *be));
        m->ranks_.back()->set_expert_parallel(m->comms_[size_t(r)].get(), part);
    }
    m->rank_chunks_.resize(size_t(ranks));
    for (int r = 1; r < ranks; ++r) m->threads_.emplace_back([p = m.get(), r] { p->worker(r); });
    return std::unique_ptr<Model>(std::move(m));
}

ExpertParallelModel::~ExpertParallelModel() {
    {
        std::lock_guard lk(m_);
        stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
}

void ExpertParallelModel::set_precision(Precision p) {
    for (auto& r : ranks_) r->set_precision(p);
}

StateSize ExpertParallelModel::state_size() const {
    StateSize s = ranks_[0]->state_size();  // every rank keeps a sequence's full attention state
    s.fixed_bytes *= int64_t(ranks_.size());
    s.bytes_per_token *= int64_t(ranks_.size());
    return s;
}

std::unique_ptr<SequenceState> ExpertParallelModel::new_state(int64_t capacity) {
    std::vector<std::unique_ptr<SequenceState>> parts;
    for (auto& r : ranks_) parts.push_back(r->new_state(capacity));
    return std::make_unique<RanksState>(std::move(parts), capacity);
}

void ExpertParallelModel::worker(int rank) {
    uint64_t seen = 0;
    for (;;) {
        std::unique_lock lk(m_);
        cv_.wait(lk, [&] { return stop_ || step_ != seen; });
        if (stop_) return;
        seen = step_;
        lk.unlock();
        ranks_[size_t(rank)]->forward(rank_chunks_[size_t(rank)]);
        lk.lock();
        if (--pending_ == 0) cv_.notify_all();
    }
}

std::vector<float> ExpertParallelModel::forward(std::span<const SeqChunk> chunks) {
    for (size_t r = 0; r < ranks_.size(); ++r) {
        std::vector<SeqChunk>& rc = rank_chunks_[r];
        rc.assign(chunks.begin(), chunks.end());
        for (SeqChunk& c : rc) {
            auto* st = dynamic_cast<RanksState*>(c.state);
            DI_CHECK(st != nullptr, "a chunk's state was not made by this expert-parallel model");
            c.state = st->part(r);
        }
    }
    {
        std::lock_guard lk(m_);
        pending_ = int(ranks_.size()) - 1;
        ++step_;
    }
    cv_.notify_all();
    std::vector<float> logits = ranks_[0]->forward(rank_chunks_[0]);
    {
        std::unique_lock lk(m_);
        cv_.wait(lk, [&] { return pending_ == 0; });
    }
    for (const SeqChunk& c : chunks) c.state->advance(int64_t(c.tokens.size()));
    return logits;
}

}  // namespace di::model
