#include "model/seq_state.h"

#include <algorithm>
#include <random>
#include <vector>

#include "core/check.h"

namespace di::model {
namespace {

// Calls f(view_slot, rows, cols) for every tensor of one sequence's state in a fixed order: the main
// layers, then (draft_tokens > 0) the MTP block's ring and each main layer's undo rows.
template <class F>
void for_each_tensor(const ModelConfig& c, int64_t capacity, std::vector<LayerState>* layers, F&& f) {
    auto at = [&](int64_t l) { return layers ? &(*layers)[size_t(l)] : nullptr; };
    for (int l = 0; l < int(c.n_layers); ++l) {
        LayerState* ls = at(l);
        f(ls ? &ls->ring : nullptr, c.window - 1, c.head_dim);
        const AttnType t = c.attn_types[size_t(l)];
        if (t == AttnType::kSliding) continue;
        const bool csa = t == AttnType::kCsa;
        const int64_t rate = c.compress_rate(l);
        auto compressor = [&](CompressorState* s, int64_t d) {
            const int64_t width = csa ? 2 * d : d;
            f(s ? &s->buf_kv : nullptr, rate, width);
            f(s ? &s->buf_gate : nullptr, rate, width);
            if (csa) {
                f(s ? &s->ovl_kv : nullptr, rate, d);
                f(s ? &s->ovl_gate : nullptr, rate, d);
            }
            f(s ? &s->entries : nullptr, capacity / rate, d);
        };
        compressor(ls ? &ls->comp : nullptr, c.head_dim);
        if (csa) compressor(ls ? &ls->index : nullptr, c.index_dim);
    }
    if (c.draft_tokens == 0) return;
    LayerState* mtp = at(c.n_layers);
    f(mtp ? &mtp->ring : nullptr, c.window - 1, c.head_dim);
    for (int l = 0; l < int(c.n_layers); ++l) {
        LayerState* ls = at(l);
        f(ls ? &ls->undo_ring : nullptr, c.draft_tokens, c.head_dim);
        if (c.attn_types[size_t(l)] != AttnType::kCsa) continue;
        f(ls ? &ls->undo_comp_kv : nullptr, c.compress_rate(l), c.head_dim);
        f(ls ? &ls->undo_comp_gate : nullptr, c.compress_rate(l), c.head_dim);
        f(ls ? &ls->undo_index_kv : nullptr, c.csa_rate, c.index_dim);
        f(ls ? &ls->undo_index_gate : nullptr, c.csa_rate, c.index_dim);
    }
}

}  // namespace

StateSize deepseek_v4_state_size(const ModelConfig& c) {
    StateSize s;
    const int64_t probe = 1 << 20;  // entries scale exactly with capacity / rate
    int64_t at0 = 0, at_probe = 0;
    for_each_tensor(c, 0, nullptr, [&](TensorView*, int64_t r, int64_t col) { at0 += r * col * 4; });
    for_each_tensor(c, probe, nullptr, [&](TensorView*, int64_t r, int64_t col) { at_probe += r * col * 4; });
    s.fixed_bytes = at0;
    s.bytes_per_token = double(at_probe - at0) / double(probe);
    return s;
}

DeepseekV4State::DeepseekV4State(const ModelConfig& c, ops::Backend& backend, int64_t capacity)
    : SequenceState(capacity),
      layers_(size_t(c.n_layers + (c.draft_tokens > 0 ? 1 : 0))),
      backend_(&backend),
      window_(c.window),
      csa_rate_(c.csa_rate),
      n_main_(c.n_layers) {
    for (int l = 0; l < int(c.n_layers); ++l) rates_.push_back(c.compress_rate(l));
    if (c.draft_tokens > 0) rates_.push_back(0);  // the MTP block: sliding window only
    int64_t floats = 0;
    for_each_tensor(c, capacity, nullptr, [&](TensorView*, int64_t r, int64_t col) { floats += r * col; });
    bytes_ = floats * 4;
    mem_ = Tensor(backend.allocator(), DType::kF32, {floats});
    float* p = mem_.view().ptr<float>();
    for_each_tensor(c, capacity, &layers_, [&](TensorView* v, int64_t r, int64_t col) {
        *v = TensorView::contiguous(p, DType::kF32, {r, col}, mem_.view().device);
        p += r * col;
    });
    reset();
}

void DeepseekV4State::reset() {
    n_tokens_ = 0;
    undo_drafts_ = mtp_tokens_ = 0;
    backend_->fill_zero(mem_.view());
}

namespace {

// Whether a token at one of the positions [first, first + n) closes a window of `rate`.
bool closes_window(int64_t first, int64_t n, int64_t rate) { return (first + n) / rate > first / rate; }

}  // namespace

void DeepseekV4State::prepare_undo(int64_t drafts) {
    DI_CHECK(drafts >= 0 && drafts <= (layers_.empty() ? 0 : layers_[0].undo_ring.shape[0]),
             "{} drafts in a state that keeps what {} overwrite", drafts,
             layers_.empty() ? 0 : layers_[0].undo_ring.shape[0]);
    DI_CHECK(n_tokens_ + 1 + drafts <= capacity_, "{} drafts after {} tokens of a state for {}", drafts,
             n_tokens_, capacity_);
    undo_drafts_ = drafts;
    if (drafts == 0) return;
    const int64_t first = n_tokens_ + 1, slots = window_ - 1;  // the drafts' positions
    std::vector<ops::Backend::CopyPair> copies;                // one launch for the layers on a GPU
    for (int64_t l = 0; l < n_main_; ++l) {
        LayerState& ls = layers_[size_t(l)];
        for (int64_t i = 0; i < drafts && slots > 0; ++i)
            copies.push_back({ls.undo_ring.rows(i, 1), ls.ring.rows((first + i) % slots, 1)});
        if (ls.undo_comp_kv.data == nullptr) continue;  // CSA only: the overlaps a closing window replaces
        if (closes_window(first, drafts, rates_[size_t(l)])) {
            copies.push_back({ls.undo_comp_kv, ls.comp.ovl_kv});
            copies.push_back({ls.undo_comp_gate, ls.comp.ovl_gate});
        }
        if (closes_window(first, drafts, csa_rate_)) {
            copies.push_back({ls.undo_index_kv, ls.index.ovl_kv});
            copies.push_back({ls.undo_index_gate, ls.index.ovl_gate});
        }
    }
    backend_->copy_many(copies);
}

// The drafts' positions hold at most one window close of each compressor (draft_tokens <= every rate: the
// loader's check), so the overlap before the step is the one to restore when a rejected token closed it.
// Compressed entries need nothing: the entry count follows n_tokens and a window closed again rewrites its
// row; the buffers' slots of rejected tokens are written again before they are read.
void DeepseekV4State::undo(int64_t rejected) {
    DI_CHECK(rejected >= 0 && rejected <= undo_drafts_, "undo of {} tokens after a step of {} drafts",
             rejected, undo_drafts_);
    const int64_t drafts = undo_drafts_;
    undo_drafts_ = 0;
    if (rejected == 0) return;
    const int64_t first_draft = n_tokens_ - drafts, first = n_tokens_ - rejected, slots = window_ - 1;
    std::vector<ops::Backend::CopyPair> copies;
    for (int64_t l = 0; l < n_main_; ++l) {
        LayerState& ls = layers_[size_t(l)];
        for (int64_t p = first; p < n_tokens_ && slots > 0; ++p)
            copies.push_back({ls.ring.rows(p % slots, 1), ls.undo_ring.rows(p - first_draft, 1)});
        if (ls.undo_comp_kv.data == nullptr) continue;
        if (closes_window(first, rejected, rates_[size_t(l)])) {
            copies.push_back({ls.comp.ovl_kv, ls.undo_comp_kv});
            copies.push_back({ls.comp.ovl_gate, ls.undo_comp_gate});
        }
        if (closes_window(first, rejected, csa_rate_)) {
            copies.push_back({ls.index.ovl_kv, ls.undo_index_kv});
            copies.push_back({ls.index.ovl_gate, ls.undo_index_gate});
        }
    }
    backend_->copy_many(copies);
    n_tokens_ -= rejected;
}

bool DeepseekV4State::copy_from(const SequenceState& from) {
    const auto* f = dynamic_cast<const DeepseekV4State*>(&from);
    if (f == nullptr || f->rates_ != rates_) return false;
    const int64_t n = f->n_tokens();
    DI_CHECK(n <= capacity_, "state copy of {} tokens into a state for {}", n, capacity_);
    // Everything but the compressed entries has the same shape whatever the capacity; of those, the first
    // n / rate rows are written (CompressArgs::n_new), the rest is never read.
    for (size_t l = 0; l < layers_.size(); ++l) {
        const LayerState &d = layers_[l], &s = f->layers_[l];
        backend_->copy(d.ring, s.ring);
        if (rates_[l] == 0) continue;
        const int64_t rows = n / rates_[l];
        for (const auto& [dc, sc] : {std::pair{&d.comp, &s.comp}, std::pair{&d.index, &s.index}}) {
            for (const auto& [dv, sv] :
                 {std::pair{dc->buf_kv, sc->buf_kv}, std::pair{dc->buf_gate, sc->buf_gate},
                  std::pair{dc->ovl_kv, sc->ovl_kv}, std::pair{dc->ovl_gate, sc->ovl_gate}})
                if (dv.data != nullptr) backend_->copy(dv, sv);
            if (dc->entries.data != nullptr && rows > 0)
                backend_->copy(dc->entries.rows(0, rows), sc->entries.rows(0, rows));
        }
    }
    n_tokens_ = n;
    mtp_tokens_ = f->mtp_tokens_;
    undo_drafts_ = 0;
    return true;
}

void DeepseekV4State::fill_synthetic(int64_t n_tokens, uint32_t seed) {
    DI_CHECK(n_tokens >= 0 && n_tokens <= capacity_, "synthetic context of {} tokens in a state for {}",
             n_tokens, capacity_);
    for (size_t l = 0; l < rates_.size(); ++l)
        DI_CHECK(rates_[l] == 0 || n_tokens % rates_[l] == 0,
                 "synthetic context of {} tokens: not a multiple of layer {}'s compression rate {}", n_tokens,
                 l, rates_[l]);
    // One block of random values, copied over the whole state: the contents only need to be finite and
    // unequal (the indexer's top-k orders them).
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> block(size_t(1) << 20);
    for (float& v : block) v = u(rng);
    const TensorView all = mem_.view();
    for (int64_t at = 0; at < all.numel(); at += int64_t(block.size())) {
        const int64_t n = std::min<int64_t>(int64_t(block.size()), all.numel() - at);
        backend_->copy(all.rows(at, n), TensorView::contiguous(block.data(), DType::kF32, {n}));
    }
    n_tokens_ = n_tokens;
}

}  // namespace di::model
