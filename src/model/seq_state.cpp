#include "model/seq_state.h"

#include <algorithm>
#include <random>
#include <vector>

#include "core/check.h"

namespace di::model {
namespace {

// Calls f(view_slot, rows, cols) for every tensor of one sequence's state in a fixed order.
template <class F>
void for_each_tensor(const ModelConfig& c, int64_t capacity, std::vector<LayerState>* layers, F&& f) {
    for (int l = 0; l < int(c.n_layers); ++l) {
        LayerState* ls = layers ? &(*layers)[size_t(l)] : nullptr;
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
    : SequenceState(capacity), layers_(size_t(c.n_layers)), backend_(&backend) {
    for (int l = 0; l < int(c.n_layers); ++l) rates_.push_back(c.compress_rate(l));
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
    backend_->fill_zero(mem_.view());
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
