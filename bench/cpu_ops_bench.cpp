// CPU backend benchmark: linear and moe at V4-Flash shapes (and the demo lm head) on the cpu backend vs the
// reference backend, weights GB/s against a measured copy bandwidth, and demo-model decode tokens/s for
// ref vs cpu. Weights are cycled through enough replicas (>= 512 MiB) that they come from DRAM, not cache,
// as in real decoding of a large model.
//   cpu_ops_bench [--threads N] [--skip-e2e] [--decode N]
//   cpu_ops_bench --read-bandwidth [--threads N]   (prints the parallel read bandwidth in GB/s and exits)
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "core/thread_pool.h"
#include "deepinfer/engine.h"
#include "demo/demo_model.h"
#include "ops/cpu/cpu_backend.h"
#include "ops/ref/ref_backend.h"
#include "runtime/model_loader.h"

using namespace di;

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

constexpr size_t kColdBytes = size_t(512) << 20;  // > the 260 MiB L3 of the machine this was written on

struct Rand {  // splitmix64: fast fill of large buffers
    uint64_t s = 42;
    uint64_t next() {
        uint64_t z = (s += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }
} g_rand;

// Random bytes valid for the dtype: bf16 of magnitude 2^-7..2^-1, e4m3 without NaN, e8m0 2^-6..2^0.
void fill(const TensorView& v) {
    auto* b = static_cast<uint8_t*>(v.data);
    const size_t n = v.nbytes();
    for (size_t i = 0; i < n; i += 8) {
        const uint64_t r = g_rand.next();
        std::memcpy(b + i, &r, std::min<size_t>(8, n - i));
    }
    if (v.dtype == DType::kBF16)
        for (int64_t i = 0; i < v.numel(); ++i) {
            uint16_t& h = v.ptr<uint16_t>()[i];
            h = uint16_t((h & 0x807f) | ((120 + h % 7) << 7));
        }
    if (v.dtype == DType::kF8E4M3)
        for (size_t i = 0; i < n; ++i)
            if ((b[i] & 0x7f) == 0x7f) b[i] &= 0xfe;
    if (v.dtype == DType::kE8M0)
        for (size_t i = 0; i < n; ++i) b[i] = uint8_t(121 + b[i] % 7);
}

struct Weight {
    Tensor data, scale;
    ops::QWeight w;
    size_t bytes() const { return w.data.nbytes() + (scale.empty() ? 0 : w.scale.nbytes()); }
};

Weight make_weight(ops::WeightFormat fmt, int64_t out, int64_t in) {
    Weight t;
    if (fmt == ops::WeightFormat::kDense) {
        t.data = Tensor(host_allocator(), DType::kBF16, {out, in});
    } else if (fmt == ops::WeightFormat::kFp8Block) {
        t.data = Tensor(host_allocator(), DType::kF8E4M3, {out, in});
        t.scale = Tensor(host_allocator(), DType::kE8M0, {(out + 127) / 128, (in + 127) / 128});
    } else {
        t.data = Tensor(host_allocator(), DType::kFP4x2, {out, in / 2});
        t.scale = Tensor(host_allocator(), DType::kE8M0, {out, in / 32});
    }
    fill(t.data);
    if (!t.scale.empty()) fill(t.scale);
    t.w = {fmt, t.data.view(), t.scale.empty() ? TensorView{} : t.scale.view(), out, in};
    return t;
}

// Copy bandwidth (bytes read + written per second) of a parallel memcpy over `pool`, best of 5.
double copy_bandwidth(ThreadPool& pool) {
    std::vector<char> src(kColdBytes, 1), dst(kColdBytes, 0);
    const int64_t chunk = 1 << 20, n_chunks = int64_t(kColdBytes) / chunk;
    double best = 1e9;
    for (int rep = 0; rep < 5; ++rep) {
        const auto t = Clock::now();
        pool.parallel_for(n_chunks, 16, [&](int64_t b, int64_t e, int) {
            std::memcpy(dst.data() + b * chunk, src.data() + b * chunk, size_t((e - b) * chunk));
        });
        best = std::min(best, since(t));
    }
    return 2.0 * double(kColdBytes) / best;
}

// Read bandwidth (bytes read per second) of a parallel sum over `pool` of a buffer that does not fit the
// caches, best of 5: the ceiling of a decode step that streams its weights once.
double read_bandwidth(ThreadPool& pool) {
    std::vector<uint64_t> src(kColdBytes / sizeof(uint64_t), 1);
    const int64_t chunk = (1 << 20) / int64_t(sizeof(uint64_t)), n_chunks = int64_t(src.size()) / chunk;
    std::vector<uint64_t> sums(size_t(pool.size()) * 8, 0);
    double best = 1e9;
    for (int rep = 0; rep < 5; ++rep) {
        const auto t = Clock::now();
        pool.parallel_for(n_chunks, 16, [&](int64_t b, int64_t e, int worker) {
            uint64_t acc[4] = {0, 0, 0, 0};
            for (const uint64_t* p = src.data() + b * chunk; p < src.data() + e * chunk; p += 4)
                acc[0] += p[0], acc[1] += p[1], acc[2] += p[2], acc[3] += p[3];
            sums[size_t(worker) * 8] += acc[0] + acc[1] + acc[2] + acc[3];
        });
        best = std::min(best, since(t));
    }
    uint64_t total = 0;
    for (uint64_t v : sums) total += v;
    if (total == 0) std::fprintf(stderr, "read_bandwidth: no data\n");  // keeps the sums alive
    return double(kColdBytes) / best;
}

struct LinearCase {
    const char* name;
    int64_t n, in, out;
    ops::WeightFormat fmt;
    ops::ActQuant act = ops::ActQuant::kNone;  // kFp8Block128: the `native` precision's fp8 activation blocks
};

void bench_linear(ops::Backend& cpu, ops::Backend& ref, const LinearCase& c, double copy_bw) {
    std::vector<Weight> reps;
    size_t total = 0;
    do {
        reps.push_back(make_weight(c.fmt, c.out, c.in));
        total += reps.back().bytes();
    } while (total < kColdBytes);
    Tensor x(host_allocator(), DType::kF32, {c.n, c.in}), y(host_allocator(), DType::kF32, {c.n, c.out});
    for (int64_t i = 0; i < x.view().numel(); ++i)
        x.view().ptr<float>()[i] = float(int64_t(g_rand.next() % 2001) - 1000) * 1e-3f;
    cpu.linear({x, reps[0].w, y, c.act});  // warm-up (scratch allocation)
    int64_t calls = 0;
    const auto t = Clock::now();
    while (calls < int64_t(reps.size()) || since(t) < 0.5)
        cpu.linear({x, reps[size_t(calls++ % int64_t(reps.size()))].w, y, c.act});
    const double t_cpu = since(t) / double(calls);
    const auto tr = Clock::now();
    ref.linear({x, reps[0].w, y, c.act});
    const double t_ref = since(tr);
    const double gbs = double(reps[0].bytes()) / t_cpu;
    fmt::print("| linear {} | {} | {:.3f} | {:.1f} | {:.1f} | {:.0f}% | {:.1f} | {:.0f}x |\n", c.name, c.n,
               double(reps[0].bytes()) / 1e6, t_cpu * 1e6, gbs / 1e9, 100.0 * gbs / (copy_bw / 2),
               t_ref * 1e3, t_ref / t_cpu);
}

// V4-Flash routed experts: 256 ids over 32 distinct FP4 expert weight sets (400 MB, > L3), k = 6.
void bench_moe(ops::Backend& cpu, ops::Backend& ref, int64_t n, double copy_bw,
               ops::ActQuant act = ops::ActQuant::kNone) {
    const int64_t D = 4096, I = 2048, E = 256, k = 6, distinct = 32;
    std::vector<Weight> store;
    for (int64_t e = 0; e < distinct; ++e) {
        store.push_back(make_weight(ops::WeightFormat::kFp4Group, I, D));
        store.push_back(make_weight(ops::WeightFormat::kFp4Group, I, D));
        store.push_back(make_weight(ops::WeightFormat::kFp4Group, D, I));
    }
    std::vector<ops::ExpertWeights> experts;
    for (int64_t e = 0; e < E; ++e)
        experts.push_back({store[size_t(3 * (e % distinct))].w, store[size_t(3 * (e % distinct) + 1)].w,
                           store[size_t(3 * (e % distinct) + 2)].w});
    Tensor x(host_allocator(), DType::kF32, {n, D}), out(host_allocator(), DType::kF32, {n, D});
    Tensor ids(host_allocator(), DType::kI32, {n, k}), w(host_allocator(), DType::kF32, {n, k});
    for (int64_t i = 0; i < n * D; ++i)
        x.view().ptr<float>()[i] = float(int64_t(g_rand.next() % 2001) - 1000) * 1e-3f;
    for (int64_t i = 0; i < n * k; ++i) w.view().ptr<float>()[i] = 0.1f;
    auto route = [&] {  // k distinct experts per token, different each call
        for (int64_t t = 0; t < n; ++t)
            for (int64_t j = 0; j < k; ++j) {
                int32_t e;
                bool dup;
                do {
                    e = int32_t(g_rand.next() % E);
                    dup = false;
                    for (int64_t q = 0; q < j; ++q) dup |= ids.view().ptr<int32_t>()[t * k + q] == e;
                } while (dup);
                ids.view().ptr<int32_t>()[t * k + j] = e;
            }
    };
    ops::MoeArgs a{x, ids, w, experts.data(), E, out, 10.0f, act};
    route();
    cpu.moe(a);
    int64_t calls = 0;
    double t_cpu = 0;
    std::vector<char> used(static_cast<size_t>(distinct));
    int64_t bytes = 0;
    while (calls < 8 || t_cpu < 0.5) {
        route();
        std::fill(used.begin(), used.end(), 0);
        for (int64_t i = 0; i < n * k; ++i) used[size_t(ids.view().ptr<int32_t>()[i] % distinct)] = 1;
        for (char u : used) bytes += u ? int64_t(store[0].bytes() * 3) : 0;
        const auto t = Clock::now();
        cpu.moe(a);
        t_cpu += since(t);
        ++calls;
    }
    t_cpu /= double(calls);
    const double per_call = double(bytes) / double(calls);
    const auto tr = Clock::now();
    ref.moe(a);
    const double t_ref = since(tr);
    const double gbs = per_call / t_cpu;
    fmt::print(
        "| moe fp4 256 experts k=6, 4096x2048{} | {} | {:.3f} | {:.1f} | {:.1f} | {:.0f}% | {:.1f} | {:.0f}x "
        "|\n",
        act == ops::ActQuant::kNone ? "" : " native", n, per_call / 1e6, t_cpu * 1e6, gbs / 1e9,
        100.0 * gbs / (copy_bw / 2), t_ref * 1e3, t_ref / t_cpu);
}

struct DecodeResult {
    double generate_tps = 0;  // through the Engine, sampler included
    double forward_tps = 0;   // model forward only (argmax on the host)
    std::vector<int32_t> tokens;
};

// Greedy decode of the demo model, twice: through the Engine, and as bare forward steps.
DecodeResult demo_decode(ops::Backend& be, const std::string& dir, int64_t n_new) {
    auto m = runtime::load_model(dir, be);
    if (!m) {
        fmt::print(stderr, "{}\n", m.error().message);
        std::exit(1);
    }
    model::Model& model = **m;
    const std::vector<int32_t> prompt = {0, 5, 1000, 42, 77, 12345, 900, 3};
    DecodeResult d;
    {  // the Engine on the same backend kind (its own instance: DEEPINFER_THREADS sets the cpu threads)
        EngineOptions eo;
        eo.model_dir = dir;
        eo.backend = std::string(be.name());
        auto engine = Engine::create(eo);
        if (!engine) {
            fmt::print(stderr, "{}\n", engine.error().message);
            std::exit(1);
        }
        Request r;
        r.prompt = prompt;
        r.sampling.temperature = 0.0f;
        r.stop.max_tokens = n_new + 1;
        r.stop.ignore_eos = true;
        auto stream = (*engine)->submit(r);
        if (!stream) {
            fmt::print(stderr, "{}\n", stream.error().message);
            std::exit(1);
        }
        Clock::time_point first{};
        for (bool done = false; !done;) {
            auto e = (*stream)->next(std::chrono::milliseconds(1000));
            if (!e) continue;
            if (d.tokens.empty() && !e->tokens.empty()) first = Clock::now();
            for (const GeneratedToken& t : e->tokens) d.tokens.push_back(t.id);
            done = e->finished;
        }
        d.generate_tps = double(d.tokens.size() - 1) / since(first);  // token 1 comes from the prefill
    }

    const int64_t vocab = model.config().vocab_size;
    const std::unique_ptr<model::SequenceState> st = model.new_state(int64_t(prompt.size()) + n_new + 1);
    model::SeqChunk c{st.get(), prompt, false};
    std::vector<float> logits = model.forward(std::span<const model::SeqChunk>(&c, 1));
    const auto t = Clock::now();
    for (int64_t i = 0; i < n_new; ++i) {
        int32_t next = 0;
        for (int64_t v = 1; v < vocab; ++v)
            if (logits[size_t(v)] > logits[size_t(next)]) next = int32_t(v);
        model::SeqChunk s{st.get(), std::span<const int32_t>(&next, 1), false};
        logits = model.forward(std::span<const model::SeqChunk>(&s, 1));
    }
    d.forward_tps = double(n_new) / since(t);
    return d;
}

}  // namespace

int main(int argc, char** argv) {
    int threads = 0;
    bool e2e = true, read_only = false;
    int64_t n_decode = 32;
    std::string only;  // run only the op rows whose name contains this
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--threads" && i + 1 < argc) {
            threads = std::stoi(argv[++i]);
            setenv("DEEPINFER_THREADS", std::to_string(threads).c_str(), 1);  // the Engine's cpu backend too
        } else if (a == "--skip-e2e")
            e2e = false;
        else if (a == "--decode" && i + 1 < argc)
            n_decode = std::stoll(argv[++i]);
        else if (a == "--read-bandwidth")
            read_only = true;
        else if (a == "--only" && i + 1 < argc)
            only = argv[++i];
    }
    ops::CpuBackend cpu(threads);
    auto ref = ops::make_ref_backend();
    ThreadPool pool(cpu.n_threads());
    if (read_only) {  // for scripts: one number, GB/s
        fmt::print("{:.2f}\n", read_bandwidth(pool) / 1e9);
        return 0;
    }
    const double copy_bw = copy_bandwidth(pool);
    std::string load = "?";
    if (FILE* f = std::fopen("/proc/loadavg", "r")) {  // shared machines: say how busy this one was
        char buf[64] = {};
        if (std::fgets(buf, sizeof buf, f)) load = std::string(buf, strcspn(buf, "\n"));
        std::fclose(f);
    }
    fmt::print(
        "cpu backend: {} threads, hardware_concurrency {}, load average {}; copy bandwidth {:.1f} GB/s "
        "(read + write, {} MiB memcpy over {} threads)\n\n",
        cpu.n_threads(), std::thread::hardware_concurrency(), load, copy_bw / 1e9, kColdBytes >> 20,
        pool.size());
    fmt::print("| op | rows | weight MB | cpu us | weights GB/s | % of copy read BW | ref ms | speed-up |\n");
    fmt::print("|---|---:|---:|---:|---:|---:|---:|---:|\n");
    const LinearCase cases[] = {
        {"fp8 q_a 4096->1024", 1, 4096, 1024, ops::WeightFormat::kFp8Block},
        {"fp8 q_b 1024->32768", 1, 1024, 32768, ops::WeightFormat::kFp8Block},
        {"fp8 o_b 8192->4096", 1, 8192, 4096, ops::WeightFormat::kFp8Block},
        {"fp4 expert w1 4096->2048", 1, 4096, 2048, ops::WeightFormat::kFp4Group},
        {"bf16 demo lm head 256->129280", 1, 256, 129280, ops::WeightFormat::kDense},
        {"bf16 mid lm head 1024->129280", 1, 1024, 129280, ops::WeightFormat::kDense},
        {"fp8 q_a 4096->1024", 4, 4096, 1024, ops::WeightFormat::kFp8Block},
        {"fp8 q_a 4096->1024", 8, 4096, 1024, ops::WeightFormat::kFp8Block},
        {"fp8 q_a 4096->1024", 16, 4096, 1024, ops::WeightFormat::kFp8Block},
        {"fp8 q_a 4096->1024", 128, 4096, 1024, ops::WeightFormat::kFp8Block},
        {"bf16 compressor 4096->1024", 1, 4096, 1024, ops::WeightFormat::kDense},
        {"bf16 compressor 4096->1024", 8, 4096, 1024, ops::WeightFormat::kDense},
        {"bf16 compressor 4096->1024", 128, 4096, 1024, ops::WeightFormat::kDense},
        {"fp8 q_a 4096->1024 native", 1, 4096, 1024, ops::WeightFormat::kFp8Block,
         ops::ActQuant::kFp8Block128},
        {"fp8 q_b 1024->32768 native", 1, 1024, 32768, ops::WeightFormat::kFp8Block,
         ops::ActQuant::kFp8Block128},
        {"fp8 o_b 8192->4096 native", 1, 8192, 4096, ops::WeightFormat::kFp8Block,
         ops::ActQuant::kFp8Block128},
        {"fp8 q_a 4096->1024 native", 4, 4096, 1024, ops::WeightFormat::kFp8Block,
         ops::ActQuant::kFp8Block128},
        {"fp8 q_a 4096->1024 native", 8, 4096, 1024, ops::WeightFormat::kFp8Block,
         ops::ActQuant::kFp8Block128},
        {"fp8 q_a 4096->1024 native", 16, 4096, 1024, ops::WeightFormat::kFp8Block,
         ops::ActQuant::kFp8Block128},
        {"fp8 q_a 4096->1024 native", 128, 4096, 1024, ops::WeightFormat::kFp8Block,
         ops::ActQuant::kFp8Block128},
    };
    for (const LinearCase& c : cases)
        if (std::string(c.name).find(only) != std::string::npos) bench_linear(cpu, *ref, c, copy_bw);
    if (std::string("moe").find(only) != std::string::npos || only == "native") {
        if (only != "native") {
            bench_moe(cpu, *ref, 1, copy_bw);
            bench_moe(cpu, *ref, 8, copy_bw);
        }
        bench_moe(cpu, *ref, 1, copy_bw, ops::ActQuant::kFp8Block128);
        bench_moe(cpu, *ref, 8, copy_bw, ops::ActQuant::kFp8Block128);
    }
    if (!e2e) return 0;

    auto dir = demo::ensure_demo_model();
    if (!dir) return fmt::print(stderr, "{}\n", dir.error().message), 1;
    const int64_t n_ref = std::min<int64_t>(n_decode, 8);
    const DecodeResult r = demo_decode(*ref, *dir, n_ref), c = demo_decode(cpu, *dir, n_decode);
    const bool same = std::equal(r.tokens.begin(), r.tokens.end(), c.tokens.begin());
    fmt::print(
        "\ndemo model greedy decode, 8-token prompt (ref: {} tokens, cpu: {} tokens; the first {} identical: "
        "{})\n",
        n_ref, n_decode, r.tokens.size(), same ? "yes" : "NO");
    fmt::print("| path | ref tokens/s | cpu tokens/s | speed-up |\n|---|---:|---:|---:|\n");
    fmt::print("| Engine generation (sampler included) | {:.2f} | {:.2f} | {:.1f}x |\n", r.generate_tps,
               c.generate_tps, c.generate_tps / r.generate_tps);
    fmt::print("| model forward only (host argmax) | {:.2f} | {:.2f} | {:.1f}x |\n", r.forward_tps,
               c.forward_tps, c.forward_tps / r.forward_tps);
    return 0;
}
