#include "model/expert_parallel_model.h"

#include <algorithm>

#include "core/check.h"

namespace di::model {
namespace {

// A sequence's state on its home rank (attention is data-parallel: no other rank holds any of it); its bytes
// count against that rank's load while it lives.
class HomeState final : public SequenceState {
  public:
    HomeState(std::unique_ptr<SequenceState> part, int rank, ops::Backend* home, ops::Backend* caller,
              std::shared_ptr<std::vector<int64_t>> load, std::shared_ptr<std::mutex> load_m,
              int64_t capacity)
        : SequenceState(capacity),
          part_(std::move(part)),
          rank_(rank),
          home_(home),
          caller_(caller),
          load_(std::move(load)),
          load_m_(std::move(load_m)) {
        bytes_ = part_->bytes();
    }
    ~HomeState() override {
        std::lock_guard lk(*load_m_);
        (*load_)[size_t(rank_)] -= bytes_;
    }
    int rank() const { return rank_; }
    SequenceState* part() { return part_.get(); }
    void reset() override {
        n_tokens_ = 0;
        home_->bind_thread();
        part_->reset();
        caller_->bind_thread();
    }
    // A copy between two ranks' states waits for the source's rank first (its last writes are on that rank's
    // stream, the copy runs on this one's).
    bool copy_from(const SequenceState& from) override {
        const auto* f = dynamic_cast<const HomeState*>(&from);
        if (f == nullptr) return false;
        if (f->home_ != home_) {
            f->home_->bind_thread();
            f->home_->synchronize();
        }
        home_->bind_thread();
        const bool ok = part_->copy_from(*f->part_);
        caller_->bind_thread();
        if (ok) n_tokens_ = f->n_tokens();
        return ok;
    }
    void fill_synthetic(int64_t n_tokens, uint32_t seed) override {
        home_->bind_thread();
        part_->fill_synthetic(n_tokens, seed);
        caller_->bind_thread();
        n_tokens_ = n_tokens;
    }
    void prepare_undo(int64_t drafts) override {
        home_->bind_thread();
        part_->prepare_undo(drafts);
        caller_->bind_thread();
    }
    void undo(int64_t rejected) override {
        home_->bind_thread();
        part_->undo(rejected);
        caller_->bind_thread();
        n_tokens_ -= rejected;
    }

  private:
    std::unique_ptr<SequenceState> part_;
    int rank_;
    ops::Backend* home_;    // the part lives on this backend's device
    ops::Backend* caller_;  // rank 0's, bound on the engine's thread
    std::shared_ptr<std::vector<int64_t>> load_;
    std::shared_ptr<std::mutex> load_m_;
};

HomeState& home_state(const SeqChunk& c) {
    auto* st = dynamic_cast<HomeState*>(c.state);
    DI_CHECK(st != nullptr, "a chunk's state was not made by this expert-parallel model");
    return *st;
}

// Logits rows of a chunk in a step's result.
size_t logits_rows(const SeqChunk& c) { return c.all_logits ? c.tokens.size() : c.tokens.empty() ? 0 : 1; }

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
    m->rank_logits_.resize(size_t(ranks));
    m->rank_picks_.resize(size_t(ranks));
    m->rank_cands_.resize(size_t(ranks));
    m->rank_temps_.resize(size_t(ranks));
    m->rank_drafts_.resize(size_t(ranks));
    m->rank_guesses_.resize(size_t(ranks));
    m->load_ = std::make_shared<std::vector<int64_t>>(size_t(ranks), 0);
    m->load_m_ = std::make_shared<std::mutex>();
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
    return ranks_[0]->state_size();  // a sequence's state lives on its home rank only
}

std::unique_ptr<SequenceState> ExpertParallelModel::new_state(int64_t capacity) {
    int r = 0;
    {
        std::lock_guard lk(*load_m_);
        r = int(std::min_element(load_->begin(), load_->end()) - load_->begin());
    }
    return new_state_on(capacity, r);
}

std::unique_ptr<SequenceState> ExpertParallelModel::new_state_on(int64_t capacity, int home) {
    DI_CHECK(home >= 0 && home < int(ranks_.size()), "state home {} of {} ranks", home, ranks_.size());
    std::lock_guard lk(*load_m_);
    const size_t r = size_t(home);
    ranks_[r]->backend().bind_thread();
    std::unique_ptr<SequenceState> part = ranks_[r]->new_state(capacity);
    ranks_[0]->backend().bind_thread();
    (*load_)[r] += part->bytes();
    return std::make_unique<HomeState>(std::move(part), home, &ranks_[r]->backend(), &ranks_[0]->backend(),
                                       load_, load_m_, capacity);
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
        run_rank(rank);
        lk.lock();
        if (--pending_ == 0) cv_.notify_all();
    }
}

void ExpertParallelModel::run_rank(int rank) {
    DeepseekV4& m = *ranks_[size_t(rank)];
    const std::vector<SeqChunk>& chunks = rank_chunks_[size_t(rank)];
    if (want_ == Want::kDraft || want_ == Want::kDraftLogits) {  // the drafter's MoE exchanges on every rank
        const std::vector<DraftChunk>& drafts = rank_drafts_[size_t(rank)];
        if (drafts.empty())
            m.idle_draft();
        else if (want_ == Want::kDraft)
            rank_guesses_[size_t(rank)] = m.draft(drafts);
        else
            rank_logits_[size_t(rank)] = m.draft_logits(drafts);
        return;
    }
    if (chunks.empty())
        m.idle_step();
    else if (want_ == Want::kGreedy)
        rank_picks_[size_t(rank)] = m.forward_greedy(chunks);
    else if (want_ == Want::kCandidates)
        rank_cands_[size_t(rank)] = m.forward_candidates(chunks, rank_temps_[size_t(rank)], per_row_);
    else
        rank_logits_[size_t(rank)] = m.forward(chunks);
}

void ExpertParallelModel::step(std::span<const SeqChunk> chunks, Want want,
                               std::span<const float> temperatures) {
    for (auto& rc : rank_chunks_) rc.clear();
    for (auto& t : rank_temps_) t.clear();
    row_home_.clear();
    chunk_home_.clear();
    size_t row = 0;
    std::vector<int64_t> local(ranks_.size(), 0);  // each rank's rows so far
    for (const SeqChunk& c : chunks) {
        HomeState& st = home_state(c);
        SeqChunk part = c;
        part.state = st.part();
        const size_t r = size_t(st.rank());
        chunk_home_.push_back(st.rank());
        rank_chunks_[r].push_back(part);
        for (size_t i = 0; i < logits_rows(c); ++i, ++row) {
            if (want == Want::kCandidates) rank_temps_[r].push_back(temperatures[row]);
            row_home_.emplace_back(st.rank(), local[r]++);
        }
    }
    DI_CHECK(want != Want::kCandidates || row == temperatures.size(), "{} temperatures for {} logits rows",
             temperatures.size(), row);
    run_all(want);
    for (const SeqChunk& c : chunks) c.state->advance(int64_t(c.tokens.size()));
}

void ExpertParallelModel::run_all(Want want) {
    want_ = want;
    {
        std::lock_guard lk(m_);
        pending_ = int(ranks_.size()) - 1;
        ++step_;
    }
    cv_.notify_all();
    ranks_[0]->backend().bind_thread();  // the engine may step from another thread than the one that loaded
    run_rank(0);
    std::unique_lock lk(m_);
    cv_.wait(lk, [&] { return pending_ == 0; });
}

void ExpertParallelModel::split_drafts(std::span<const DraftChunk> chunks) {
    DI_CHECK(chunks.size() == chunk_home_.size(), "{} draft chunks after a step of {}", chunks.size(),
             chunk_home_.size());
    for (auto& d : rank_drafts_) d.clear();
    for (size_t c = 0; c < chunks.size(); ++c) rank_drafts_[size_t(chunk_home_[c])].push_back(chunks[c]);
}

std::vector<int32_t> ExpertParallelModel::draft(std::span<const DraftChunk> chunks) {
    split_drafts(chunks);
    run_all(Want::kDraft);
    std::vector<int32_t> out;
    std::vector<size_t> next(ranks_.size(), 0);  // each rank's next guess
    for (const int r : chunk_home_) out.push_back(rank_guesses_[size_t(r)][next[size_t(r)]++]);
    return out;
}

std::vector<float> ExpertParallelModel::draft_logits(std::span<const DraftChunk> chunks) {
    split_drafts(chunks);
    run_all(Want::kDraftLogits);
    const size_t V = size_t(config().vocab_size);
    std::vector<float> out;
    std::vector<size_t> next(ranks_.size(), 0);  // each rank's next row
    for (size_t c = 0; c < chunks.size(); ++c) {
        const size_t r = size_t(chunk_home_[c]), rows = chunks[c].next_tokens.size();
        const std::vector<float>& src = rank_logits_[r];
        out.insert(out.end(), src.begin() + ptrdiff_t(next[r] * V),
                   src.begin() + ptrdiff_t((next[r] + rows) * V));
        next[r] += rows;
    }
    return out;
}

std::vector<float> ExpertParallelModel::forward(std::span<const SeqChunk> chunks) {
    step(chunks, Want::kLogits);
    const size_t V = size_t(config().vocab_size);
    std::vector<float> out;
    for (const auto& [r, i] : row_home_) {
        const std::vector<float>& src = rank_logits_[size_t(r)];
        out.insert(out.end(), src.begin() + ptrdiff_t(size_t(i) * V),
                   src.begin() + ptrdiff_t(size_t(i + 1) * V));
    }
    return out;
}

GreedyRows ExpertParallelModel::forward_greedy(std::span<const SeqChunk> chunks) {
    step(chunks, Want::kGreedy);
    GreedyRows out;
    for (const auto& [r, i] : row_home_) {
        const GreedyRows& src = rank_picks_[size_t(r)];
        out.ids.push_back(src.ids[size_t(i)]);
        out.bad.push_back(src.bad[size_t(i)]);
        out.bad_value.push_back(src.bad_value[size_t(i)]);
    }
    return out;
}

CandidateRows ExpertParallelModel::forward_candidates(std::span<const SeqChunk> chunks,
                                                      std::span<const float> temperatures, int64_t per_row) {
    per_row_ = per_row;
    step(chunks, Want::kCandidates, temperatures);
    CandidateRows out;
    out.per_row = std::min(per_row, config().vocab_size);
    const size_t C = size_t(out.per_row);
    for (const auto& [r, i] : row_home_) {
        const CandidateRows& src = rank_cands_[size_t(r)];
        const size_t at = size_t(i);
        out.ids.insert(out.ids.end(), src.ids.begin() + ptrdiff_t(at * C),
                       src.ids.begin() + ptrdiff_t((at + 1) * C));
        out.logits.insert(out.logits.end(), src.logits.begin() + ptrdiff_t(at * C),
                          src.logits.begin() + ptrdiff_t((at + 1) * C));
        out.sums.insert(out.sums.end(), src.sums.begin() + ptrdiff_t(at * 3),
                        src.sums.begin() + ptrdiff_t(at * 3 + 3));
        out.bad.push_back(src.bad[at]);
    }
    return out;
}

std::vector<float> ExpertParallelModel::step_logits_rows(std::span<const int64_t> rows) {
    const size_t V = size_t(config().vocab_size);
    std::vector<float> out;
    for (const int64_t row : rows) {
        DI_CHECK(row >= 0 && size_t(row) < row_home_.size(), "logits row {} of {}", row, row_home_.size());
        const auto [r, i] = row_home_[size_t(row)];
        ranks_[size_t(r)]->backend().bind_thread();
        const std::vector<float> one = ranks_[size_t(r)]->step_logits_rows(std::span(&i, 1));
        out.insert(out.end(), one.begin(), one.begin() + ptrdiff_t(V));
    }
    ranks_[0]->backend().bind_thread();
    return out;
}

std::vector<float> ExpertParallelModel::step_logits_at(std::span<const int64_t> rows,
                                                       std::span<const int32_t> ids) {
    DI_CHECK(rows.size() == ids.size(), "{} rows for {} ids", rows.size(), ids.size());
    std::vector<float> out(ids.size());
    for (size_t r = 0; r < ranks_.size(); ++r) {  // each rank's logits in one call
        std::vector<int64_t> local;
        std::vector<int32_t> local_ids;
        std::vector<size_t> from;
        for (size_t i = 0; i < rows.size(); ++i) {
            DI_CHECK(rows[i] >= 0 && size_t(rows[i]) < row_home_.size(), "logits row {} of {}", rows[i],
                     row_home_.size());
            if (size_t(row_home_[size_t(rows[i])].first) != r) continue;
            local.push_back(row_home_[size_t(rows[i])].second), local_ids.push_back(ids[i]),
                from.push_back(i);
        }
        if (local.empty()) continue;
        ranks_[r]->backend().bind_thread();
        const std::vector<float> got = ranks_[r]->step_logits_at(local, local_ids);
        for (size_t j = 0; j < from.size(); ++j) out[from[j]] = got[j];
    }
    ranks_[0]->backend().bind_thread();
    return out;
}

}  // namespace di::model
