#include "model/expert_parallel_model.h"

#include "core/check.h"

namespace di::model {
namespace {

// A sequence's state on every rank (each rank keeps its own attention state: attention is replicated).
class RanksState final : public SequenceState {
  public:
    RanksState(std::vector<std::unique_ptr<SequenceState>> parts, std::vector<ops::Backend*> backends,
               int64_t capacity)
        : SequenceState(capacity), parts_(std::move(parts)), backends_(std::move(backends)) {
        for (const auto& p : parts_) bytes_ += p->bytes();
    }
    SequenceState* part(size_t r) { return parts_[r].get(); }
    void reset() override {
        n_tokens_ = 0;
        for (size_t r = 0; r < parts_.size(); ++r) backends_[r]->bind_thread(), parts_[r]->reset();
        backends_[0]->bind_thread();
    }
    void fill_synthetic(int64_t n_tokens, uint32_t seed) override {
        for (size_t r = 0; r < parts_.size(); ++r)  // the same on every rank
            backends_[r]->bind_thread(), parts_[r]->fill_synthetic(n_tokens, seed);
        backends_[0]->bind_thread();
        n_tokens_ = n_tokens;
    }

  private:
    std::vector<std::unique_ptr<SequenceState>> parts_;
    std::vector<ops::Backend*> backends_;  // rank r's part lives on backends_[r]'s device
};

}  // namespace

Result<std::unique_ptr<Model>> ExpertParallelModel::load(
    ModelConfig cfg, std::shared_ptr<io::Checkpoint> ckpt, ops::Backend& backend,
    std::vector<std::unique_ptr<parallel::Communicator>> comms,
    const std::function<Result<std::unique_ptr<ops::Backend>>(int rank)>& make_backend) {
    const int ranks = int(comms.size());
    if (ranks < 1 || ranks > cfg.n_experts)
        return make_error(ErrorCode::kInvalidArgument, "{} expert-parallel ranks for {} routed experts",
                          ranks, cfg.n_experts);
    std::unique_ptr<ExpertParallelModel> m(new ExpertParallelModel());
    m->comms_ = std::move(comms);
    for (int r = 0; r < ranks; ++r) {
        ops::Backend* be = &backend;
        if (r > 0) {
            DI_TRY(std::unique_ptr<ops::Backend> own, make_backend(r));
            m->backends_.push_back(std::move(own));
            be = m->backends_.back().get();
        }
        const bool on_device = be->allocator().device() != Device::kHost;
        if (on_device != m->comms_[size_t(r)]->device_memory())
            return make_error(
                ErrorCode::kUnsupported,
                "expert-parallel rank {} runs on the {} backend, its communicator sums {} memory", r,
                be->name(), on_device ? "host" : "device");
        be->bind_thread();  // the weights go to this rank's device
        const ExpertPartition part{.rank = r, .size = ranks};
        DI_TRY(ModelWeights w, bind_weights(ckpt, cfg, *be, part));
        m->ranks_.push_back(std::make_unique<DeepseekV4>(cfg, std::move(w), *be));
        m->ranks_.back()->set_expert_parallel(m->comms_[size_t(r)].get(), part);
    }
    backend.bind_thread();  // the caller's thread runs rank 0
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
    std::vector<ops::Backend*> backends;
    for (auto& r : ranks_) {
        r->backend().bind_thread();
        parts.push_back(r->new_state(capacity));
        backends.push_back(&r->backend());
    }
    ranks_[0]->backend().bind_thread();
    return std::make_unique<RanksState>(std::move(parts), std::move(backends), capacity);
}

void ExpertParallelModel::worker(int rank) {
    ranks_[size_t(rank)]->backend().bind_thread();
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
    ranks_[0]->backend().bind_thread();  // the engine may step from another thread than the one that loaded
    std::vector<float> logits = ranks_[0]->forward(rank_chunks_[0]);
    {
        std::unique_lock lk(m_);
        cv_.wait(lk, [&] { return pending_ == 0; });
    }
    for (const SeqChunk& c : chunks) c.state->advance(int64_t(c.tokens.size()));
    return logits;
}

}  // namespace di::model
