// The demo checkpoint: official DeepSeek names and formats, deterministic random weights (fixed seed).
#include "demo/demo_model.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"

#ifndef DEEPINFER_ASSET_DIR
#define DEEPINFER_ASSET_DIR "assets"
#endif

namespace di::demo {
namespace {

namespace fs = std::filesystem;
constexpr const char* kVersion = "4";  // bump when the demo weights or config change

class Rng {  // splitmix64 + Box-Muller: identical everywhere
  public:
    explicit Rng(uint64_t seed) : s_(seed) {}
    uint64_t next() {
        uint64_t z = (s_ += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }
    double uniform() { return double(next() >> 11) * 0x1.0p-53; }
    double normal() {
        return std::sqrt(-2.0 * std::log(1.0 - uniform())) * std::cos(6.283185307179586 * uniform());
    }

  private:
    uint64_t s_;
};

uint8_t encode_e4m3(float x) {
    static const std::vector<float> pos = [] {  // codes 0x00..0x7e, increasing
        std::vector<float> v;
        for (int b = 0; b < 0x7f; ++b) v.push_back(fp8_e4m3_to_f32(uint8_t(b)));
        return v;
    }();
    const float a = std::min(std::fabs(x), 448.0f);
    auto it = std::lower_bound(pos.begin(), pos.end(), a);
    size_t i = size_t(it - pos.begin());
    if (i == pos.size() || (i > 0 && a - pos[i - 1] < pos[i] - a)) i = i == 0 ? 0 : i - 1;
    return uint8_t(i) | (x < 0 ? 0x80 : 0);
}

uint8_t encode_fp4(float x) {
    int best = 0;
    for (int i = 1; i < 8; ++i)
        if (std::fabs(std::fabs(x) - kFp4Values[i]) < std::fabs(std::fabs(x) - kFp4Values[best])) best = i;
    return uint8_t(best | (x < 0 ? 8 : 0));
}

template <class T>
std::vector<uint8_t> bytes_of(const std::vector<T>& v) {
    std::vector<uint8_t> b(v.size() * sizeof(T));
    std::memcpy(b.data(), v.data(), b.size());
    return b;
}

// An FP8/FP4 weight of an in-memory model, drawn from a shared pool once every pool is sized.
struct Borrowed {
    io::TensorEntry entry;
    enum Kind { kFp8Codes, kFp4Codes, kConstant } kind;
    uint8_t value = 0;  // kConstant: the byte (a UE8M0 scale)
};

struct Writer {
    const RandomModelSpec& spec;
    Rng rng{20261130};
    std::vector<io::TensorToWrite> out;
    bool pooled = false;  // FP8/FP4 weights and scales go to `borrowed` (in-memory models)
    std::vector<Borrowed> borrowed;

    bool borrow(const std::string& name, const char* dtype, std::vector<int64_t> shape, size_t nbytes,
                Borrowed::Kind kind, uint8_t value = 0) {
        if (!pooled) return false;
        io::TensorEntry e;
        e.name = name;
        e.st_dtype = dtype;
        e.shape = std::move(shape);
        e.nbytes = nbytes;
        e.file = "(memory)";
        borrowed.push_back({std::move(e), kind, value});
        return true;
    }

    void f32(const std::string& name, std::vector<int64_t> shape, double mean, double sd) {
        int64_t n = 1;
        for (int64_t s : shape) n *= s;
        std::vector<float> v(static_cast<size_t>(n));
        for (float& x : v) x = float(mean + sd * rng.normal());
        out.push_back({name, "F32", shape, bytes_of(v)});
    }
    void bf16(const std::string& name, std::vector<int64_t> shape, double mean, double sd) {
        int64_t n = 1;
        for (int64_t s : shape) n *= s;
        std::vector<uint16_t> v(static_cast<size_t>(n));
        const double half_width = sd * std::sqrt(3.0);  // uniform law with the same standard deviation
        for (uint16_t& x : v)
            x = f32_to_bf16(
                float(mean + (spec.fast_draws ? half_width * (2 * rng.uniform() - 1) : sd * rng.normal())));
        out.push_back({name, "BF16", shape, bytes_of(v)});
    }
    // FP8 e4m3 [o, i] with 128x128 UE8M0 block scales; weights ~ N(0, 1/i).
    void fp8(const std::string& base, int64_t o, int64_t i) {
        const int exp =
            int(std::floor(std::log2(std::sqrt(1.0 / double(i)) / (spec.fast_draws ? 1.0 : 16.0))));
        const int64_t n_scales = ((o + 127) / 128) * ((i + 127) / 128);
        if (borrow(base + ".weight", "F8_E4M3", {o, i}, size_t(o * i), Borrowed::kFp8Codes) &&
            borrow(base + ".scale", "F8_E8M0", {(o + 127) / 128, (i + 127) / 128}, size_t(n_scales),
                   Borrowed::kConstant, uint8_t(127 + exp)))
            return;
        std::vector<uint8_t> w(size_t(o * i));
        if (spec.fast_draws) {  // exponent field <= 7: |x| < 2, never NaN; scale keeps sd ~ 1/sqrt(i)
            for (size_t k = 0; k < w.size(); k += 8) {
                uint64_t r = rng.next();
                for (size_t j = k; j < std::min(w.size(), k + 8); ++j, r >>= 8) w[j] = uint8_t(r) & 0xBF;
            }
        } else {
            for (uint8_t& b : w) b = encode_e4m3(float(16.0 * rng.normal()));
        }
        std::vector<uint8_t> s(size_t(((o + 127) / 128) * ((i + 127) / 128)), uint8_t(127 + exp));
        out.push_back({base + ".weight", "F8_E4M3", {o, i}, w});
        out.push_back({base + ".scale", "F8_E8M0", {(o + 127) / 128, (i + 127) / 128}, s});
    }
    // FP4 e2m1 [o, i] packed two per byte (low nibble first) with per-32 UE8M0 scales.
    void fp4(const std::string& base, int64_t o, int64_t i) {
        const int exp = int(std::floor(std::log2(std::sqrt(1.0 / double(i)) / 2.0)));
        if (borrow(base + ".weight", "I8", {o, i / 2}, size_t(o * i / 2), Borrowed::kFp4Codes) &&
            borrow(base + ".scale", "F8_E8M0", {o, i / 32}, size_t(o * i / 32), Borrowed::kConstant,
                   uint8_t(127 + exp)))
            return;
        std::vector<uint8_t> w(size_t(o * i / 2));
        if (spec.fast_draws) {
            for (size_t k = 0; k < w.size(); k += 8) {
                uint64_t r = rng.next();
                for (size_t j = k; j < std::min(w.size(), k + 8); ++j, r >>= 8) w[j] = uint8_t(r);
            }
        } else {
            for (uint8_t& b : w)
                b = uint8_t(encode_fp4(float(2.0 * rng.normal())) |
                            (encode_fp4(float(2.0 * rng.normal())) << 4));
        }
        std::vector<uint8_t> s(size_t(o * i / 32), uint8_t(127 + exp));
        out.push_back({base + ".weight", "I8", {o, i / 2}, w});
        out.push_back({base + ".scale", "F8_E8M0", {o, i / 32}, s});
    }
    void compressor(const std::string& p, int64_t d, int64_t rate, bool overlap) {
        const int64_t width = overlap ? 2 * d : d;
        bf16(p + "wkv.weight", {width, spec.hidden}, 0, 1.0 / std::sqrt(double(spec.hidden)));
        bf16(p + "wgate.weight", {width, spec.hidden}, 0, 1.0 / std::sqrt(double(spec.hidden)));
        f32(p + "ape", {rate, width}, 0, 0.5);
        bf16(p + "norm.weight", {d}, 1, 0.1);
    }
};

nlohmann::ordered_json model_config(const RandomModelSpec& m) {
    std::vector<int> ratios = m.compress_ratios;
    ratios.push_back(0);  // the MTP entry of the official list
    return {{"architectures", {"DeepseekV4ForCausalLM"}},
            {"model_type", "deepseek_v4"},
            {"vocab_size", m.vocab},
            {"hidden_size", m.hidden},
            {"num_hidden_layers", ratios.size() - 1},
            {"num_attention_heads", m.heads},
            {"num_key_value_heads", 1},
            {"head_dim", m.head_dim},
            {"qk_rope_head_dim", 64},
            {"q_lora_rank", m.q_lora},
            {"o_groups", m.o_groups},
            {"o_lora_rank", m.o_lora},
            {"sliding_window", 128},
            {"compress_ratios", ratios},
            {"num_hash_layers", 1},
            {"index_n_heads", m.index_heads},
            {"index_head_dim", m.index_dim},
            {"index_topk", m.index_topk},
            {"n_routed_experts", m.experts},
            {"n_shared_experts", 1},
            {"num_experts_per_tok", m.active},
            {"moe_intermediate_size", m.moe},
            {"scoring_func", "sqrtsoftplus"},
            {"norm_topk_prob",
             true},  // as the released configs (read by other tools, e.g. llama.cpp's converter)
            {"routed_scaling_factor", 1.5},
            {"swiglu_limit", 10.0},
            {"hc_mult", 4},
            {"hc_sinkhorn_iters", 20},
            {"hc_eps", 1e-6},
            {"rms_norm_eps", 1e-6},
            {"rope_theta", 10000.0},
            {"compress_rope_theta", 160000.0},
            {"rope_scaling",
             {{"type", "yarn"},
              {"factor", 16},
              {"original_max_position_embeddings", 65536},
              {"beta_fast", 32},
              {"beta_slow", 1}}},
            {"max_position_embeddings", 1048576},
            {"bos_token_id", 0},
            {"eos_token_id", 1},
            {"tie_word_embeddings", false},
            {"torch_dtype", "bfloat16"},
            {"num_nextn_predict_layers", m.mtp ? 1 : 0},
            {"expert_dtype", "fp4"},
            {"quantization_config",
             {{"quant_method", "fp8"},
              {"fmt", "e4m3"},
              {"scale_fmt", "ue8m0"},
              {"weight_block_size", {128, 128}},
              {"activation_scheme", "dynamic"}}}};
}

Writer model_tensors(const RandomModelSpec& m, bool pooled) {
    Writer w{m, Rng{20261130}, {}, pooled, {}};
    const int64_t kVocab = m.vocab, kHidden = m.hidden, kHeads = m.heads, kHeadDim = m.head_dim,
                  kQLora = m.q_lora;
    const int64_t kGroups = m.o_groups, kOLora = m.o_lora, kIndexHeads = m.index_heads,
                  kIndexDim = m.index_dim;
    const int64_t kExperts = m.experts, kActive = m.active, kMoe = m.moe, kHc = 4;
    const int64_t kLayers = int64_t(m.compress_ratios.size());
    const double sd_emb = 1.0, sd_in = 1.0 / std::sqrt(double(kHidden));
    const int64_t mix = (2 + kHc) * kHc;
    w.bf16("embed.weight", {kVocab, kHidden}, 0, sd_emb);
    w.bf16("head.weight", {kVocab, kHidden}, 0, sd_in);
    w.bf16("norm.weight", {kHidden}, 1, 0.1);
    w.f32("hc_head_fn", {kHc, kHc * kHidden}, 0, 0.05);
    w.f32("hc_head_base", {kHc}, 0, 0.5);
    w.f32("hc_head_scale", {1}, 1, 0.2);
    // One block under prefix p: a main layer (ratio: its compress ratio; hash: hash-routed) or the MTP
    // block's (sliding, score-routed).
    auto block = [&](const std::string& p, int ratio, bool hash) {
        w.bf16(p + "attn_norm.weight", {kHidden}, 1, 0.1);
        w.bf16(p + "ffn_norm.weight", {kHidden}, 1, 0.1);
        for (const char* site : {"hc_attn_", "hc_ffn_"}) {
            w.f32(p + site + "fn", {mix, kHc * kHidden}, 0, 0.05);
            w.f32(p + site + "base", {mix}, 0, 0.5);
            w.f32(p + site + "scale", {3}, 1, 0.2);
        }
        w.f32(p + "attn.attn_sink", {kHeads}, 0, 1);
        w.fp8(p + "attn.wq_a", kQLora, kHidden);
        w.bf16(p + "attn.q_norm.weight", {kQLora}, 1, 0.1);
        w.fp8(p + "attn.wq_b", kHeads * kHeadDim, kQLora);
        w.fp8(p + "attn.wkv", kHeadDim, kHidden);
        w.bf16(p + "attn.kv_norm.weight", {kHeadDim}, 1, 0.1);
        w.fp8(p + "attn.wo_a", kGroups * kOLora, kHeads * kHeadDim / kGroups);
        w.fp8(p + "attn.wo_b", kHidden, kGroups * kOLora);
        if (ratio != 0) w.compressor(p + "attn.compressor.", kHeadDim, ratio, ratio == 4);
        if (ratio == 4) {
            w.compressor(p + "attn.indexer.compressor.", kIndexDim, 4, true);
            w.fp8(p + "attn.indexer.wq_b", kIndexHeads * kIndexDim, kQLora);
            w.bf16(p + "attn.indexer.weights_proj.weight", {kIndexHeads, kHidden}, 0, sd_in);
        }
        w.bf16(p + "ffn.gate.weight", {kExperts, kHidden}, 0, sd_in);
        if (hash) {  // distinct random experts per token
            std::vector<int64_t> t2e;
            for (int64_t t = 0; t < kVocab; ++t) {
                const int64_t a = int64_t(w.rng.next() % uint64_t(kExperts));
                for (int64_t j = 0; j < kActive; ++j) t2e.push_back((a + j) % kExperts);  // distinct experts
            }
            w.out.push_back({p + "ffn.gate.tid2eid", "I64", {kVocab, kActive}, bytes_of(t2e)});
        } else {
            w.f32(p + "ffn.gate.bias", {kExperts}, 0, 0.3);
        }
        for (int64_t e = 0; e < kExperts; ++e) {
            const std::string x = p + "ffn.experts." + std::to_string(e) + ".";
            w.fp4(x + "w1", kMoe, kHidden);
            w.fp4(x + "w3", kMoe, kHidden);
            w.fp4(x + "w2", kHidden, kMoe);
        }
        w.fp8(p + "ffn.shared_experts.w1", kMoe, kHidden);
        w.fp8(p + "ffn.shared_experts.w3", kMoe, kHidden);
        w.fp8(p + "ffn.shared_experts.w2", kHidden, kMoe);
    };
    for (int64_t l = 0; l < kLayers; ++l)
        block("layers." + std::to_string(l) + ".", m.compress_ratios[size_t(l)], l == 0);
    if (m.mtp) {  // after the main layers: their draws do not depend on it
        w.fp8("mtp.0.e_proj", kHidden, kHidden);
        w.fp8("mtp.0.h_proj", kHidden, kHidden);
        for (const char* n : {"enorm", "hnorm", "norm"})
            w.bf16(std::string("mtp.0.") + n + ".weight", {kHidden}, 1, 0.1);
        w.f32("mtp.0.hc_head_fn", {kHc, kHc * kHidden}, 0, 0.05);
        w.f32("mtp.0.hc_head_base", {kHc}, 0, 0.5);
        w.f32("mtp.0.hc_head_scale", {1}, 1, 0.2);
        block("mtp.0.", 0, false);
    }
    return w;
}

// The bytes behind an in-memory model: the tensors drawn whole, and the pools the FP8/FP4 weights are
// windows of (each weight gets its own device copy when bound, so the device reads distinct bytes).
struct Memory {
    std::vector<std::vector<uint8_t>> owned;
    std::vector<uint8_t> fp8, fp4;
    std::map<uint8_t, std::vector<uint8_t>> constants;
};

std::string cache_root() {
    if (const char* c = std::getenv("DEEPINFER_CACHE")) return c;
    if (const char* h = std::getenv("HOME")) return std::string(h) + "/.cache/deepinfer";
    return "/tmp/deepinfer-cache";
}

std::string asset_dir() {
    if (const char* a = std::getenv("DEEPINFER_ASSETS")) return a;
    return DEEPINFER_ASSET_DIR;
}

}  // namespace

Status write_random_model(const std::string& dir, const RandomModelSpec& spec) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) return make_error(ErrorCode::kIo, "cannot create model directory '{}': {}", dir, ec.message());
    std::ofstream(fs::path(dir) / "config.json") << model_config(spec).dump(1) << "\n";
    return io::write_safetensors((fs::path(dir) / "model.safetensors").string(),
                                 model_tensors(spec, false).out);
}

Result<RandomModel> random_model_in_memory(const RandomModelSpec& spec) {
    Writer w = model_tensors(spec, true);
    auto mem = std::make_shared<Memory>();
    std::vector<io::TensorEntry> entries;
    for (auto& t : w.out) {
        io::TensorEntry e{t.name, t.st_dtype, t.shape, nullptr, t.bytes.size(), "(memory)"};
        mem->owned.push_back(std::move(t.bytes));
        e.data = mem->owned.back().data();
        entries.push_back(std::move(e));
    }
    size_t most = 0;
    std::map<uint8_t, size_t> constant_bytes;
    for (const Borrowed& b : w.borrowed) {
        if (b.kind == Borrowed::kConstant)
            constant_bytes[b.value] = std::max(constant_bytes[b.value], b.entry.nbytes);
        else
            most = std::max(most, b.entry.nbytes);
    }
    const size_t pool = 2 * most + 4096;  // room for windows at many offsets
    Rng rng(20261202);
    mem->fp8.resize(pool);
    mem->fp4.resize(pool);
    for (size_t k = 0; k < pool; k += 8) {
        uint64_t a = rng.next(), b = rng.next();
        for (size_t j = k; j < std::min(pool, k + 8); ++j, a >>= 8, b >>= 8) {
            mem->fp8[j] = uint8_t(a) & 0xBF;  // exponent field <= 7: |x| < 2, never NaN (as fast_draws)
            mem->fp4[j] = uint8_t(b);
        }
    }
    for (const auto& [value, n] : constant_bytes) mem->constants[value].assign(n, value);
    size_t offset = 0;
    for (Borrowed& b : w.borrowed) {
        if (b.kind == Borrowed::kConstant) {
            b.entry.data = mem->constants[b.value].data();
        } else {
            offset = (offset + 1048576 + 4096) % (pool - b.entry.nbytes + 1);
            b.entry.data = (b.kind == Borrowed::kFp8Codes ? mem->fp8 : mem->fp4).data() + offset;
        }
        entries.push_back(std::move(b.entry));
    }
    RandomModel r;
    r.config_json = model_config(spec).dump(1);
    r.checkpoint = std::make_shared<io::Checkpoint>(
        io::Checkpoint::in_memory("(random model in memory)", std::move(entries), std::move(mem)));
    return r;
}

Result<std::string> ensure_demo_model() {
    const fs::path dir = fs::path(cache_root()) / (std::string("demo-v4-") + kVersion);
    if (fs::exists(dir / "model.safetensors") && fs::exists(dir / "tokenizer.json")) return dir.string();
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec)
        return make_error(ErrorCode::kIo, "cannot create demo model directory '{}': {}", dir.string(),
                          ec.message());
    const fs::path tok = fs::path(asset_dir()) / "tokenizer";
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) {
        fs::copy_file(tok / f, dir / f, fs::copy_options::overwrite_existing, ec);
        if (ec)
            return make_error(ErrorCode::kIo, "cannot copy the V4 tokenizer '{}' into '{}': {}",
                              (tok / f).string(), dir.string(), ec.message());
    }
    DI_TRY_STATUS(write_random_model(dir.string(), RandomModelSpec{.mtp = true}));
    return dir.string();
}

}  // namespace di::demo
