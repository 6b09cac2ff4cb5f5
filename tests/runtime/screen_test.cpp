// The kernel screen must be able to fail: planted wrong variants (an error of 100 ulp, a broadcast that
// leaves rows unwritten, a nondeterministic sum, a result that depends on the batch, a variant that silently
// lets the fallback answer) are each caught with the right reason and left out of the allow-list; a correct
// variant passes. Also: the kernels file is parsed strictly and dispatch obeys it.
#include "runtime/screen.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <map>
#include <random>

#include "ops/cpu/cpu_backend.h"
#include "ops/op_cases.h"
#include "ref_forwarding_backend.h"
#include "runtime/kernels_file.h"
#include "runtime/model_loader.h"
#include "runtime/screen_judge.h"

namespace di {
namespace {

// The reference backend with planted linear variants; dispatch takes the first allowed non-fallback one.
class Planted final : public test::RefForwarding {
  public:
    std::string_view name() const override { return "planted"; }
    std::vector<ops::KernelVariant> kernel_variants() const override {
        std::vector<ops::KernelVariant> v = {{"linear", "ref", "any", true}};
        for (const char* n : {"exact", "ulp100", "fewer_rows", "noisy", "batch_dependent", "silent",
                              "many_rows", "many_rows_dependent"})
            v.push_back({"linear", n, "any", false});
        v.push_back({"linear", "ulp100_stated", "states its accuracy: 1e-3", false, true, true, 1e-3});
        return v;
    }
    void set_allow_list(const ops::AllowList& l) override {
        active_.clear();
        for (const auto& v : kernel_variants())
            if (!v.fallback && l.allows(v.op, v.name)) active_ = v.name;
    }
    int64_t dispatch_count(std::string_view, std::string_view v) const override {
        auto it = counts_.find(std::string(v));
        return it == counts_.end() ? 0 : it->second;
    }
    bool force_variant(std::string_view, std::string_view v) override {
        forced_ = v;
        return true;
    }
    // "many_rows*" take one row only when forced (as the GPU's prefill variants): "many_rows" then gives the
    // batch's bits, "many_rows_dependent" other bits.
    void linear(const ops::LinearArgs& a) override {
        ref().linear(a);
        const std::string& on = forced_.empty() ? active_ : forced_;
        const int64_t n = a.y.shape[0], o = a.y.shape[1];
        if (on.empty() || on == "silent") return;  // "silent" claims to run but the fallback answered
        if (on.rfind("many_rows", 0) == 0 && n == 1 && forced_.empty()) return;
        ++counts_[on];
        if (on == "many_rows_dependent" && n == 1)
            for (int64_t c = 0; c < o; ++c)
                a.y.ptr<float>()[c] = std::nextafter(a.y.ptr<float>()[c], INFINITY);
        for (int64_t r = 0; r < n; ++r)
            for (int64_t c = 0; c < o; ++c) {
                float& y = a.y.ptr<float>()[r * a.y.stride[0] + c];
                if (on == "ulp100" || on == "ulp100_stated")
                    y = std::nextafter(y, INFINITY), y *= 1.0f + 100 * 0x1p-23f;
                if (on == "fewer_rows" && r == n - 1) std::memset(&y, 0xff, sizeof y);
                if (on == "noisy" && rng_() % 2) y = std::nextafter(y, INFINITY);
                if (on == "batch_dependent" && n > 1) y = std::nextafter(y, INFINITY);
            }
    }

  private:
    std::string active_, forced_;
    std::map<std::string, int64_t> counts_;
    std::mt19937 rng_{5};
};

TEST(Screen, PlantedWrongVariantsAreCaughtWithTheirReason) {
    Planted be;
    Tensor wt(host_allocator(), DType::kF32, {48, 64});
    std::mt19937_64 rng(3);
    std::uniform_real_distribution<float> u(-0.5f, 0.5f);
    for (int64_t i = 0; i < wt.view().numel(); ++i) wt.view().ptr<float>()[i] = u(rng);
    ops::QWeight w;
    w.data = wt.view();
    w.out_dim = 48, w.in_dim = 64;
    const std::map<std::string, std::string> expect = {
        {"exact", "pass"},
        {"ulp100", "fail: error"},
        {"fewer_rows", "fail: non-finite or unwritten outputs"},
        {"noisy", "fail: two runs differ"},
        {"batch_dependent", "fail: row 0 alone differs"},
        {"silent", "skip: not dispatched"},
        {"ulp100_stated", "pass"},  // within the accuracy it states
        {"many_rows", "pass"},      // row 0 alone forced onto it: the batch's bits
        {"many_rows_dependent", "fail: row 0 alone differs"},
    };
    std::vector<runtime::ScreenRow> rows;
    for (const ops::KernelVariant& v : be.kernel_variants()) {
        if (v.fallback) continue;
        const runtime::ScreenRow r = runtime::screen_linear(be, v, w, w, 8, rng);
        EXPECT_EQ(r.verdict.rfind(expect.at(v.name), 0), 0u) << v.name << ": " << r.verdict;
        rows.push_back(r);
    }
    const ops::AllowList l = runtime::allow_list_from(be, rows);
    EXPECT_TRUE(l.allows("linear", "exact"));
    EXPECT_TRUE(l.allows("linear", "ref"));  // fallbacks always
    EXPECT_TRUE(l.allows("linear", "many_rows"));
    for (const char* bad :
         {"ulp100", "fewer_rows", "noisy", "batch_dependent", "silent", "many_rows_dependent"})
        EXPECT_FALSE(l.allows("linear", bad)) << bad;
}

// A prefill-sized case judges every variant against one reference, computed in row blocks on several
// threads: the exact variant still passes (a block split that changed the reference would fail it), the
// planted ones fail with the same reasons, and every row shares the one fallback time.
TEST(Screen, OneReferenceForAllVariantsOfAPrefillCase) {
    Planted be;
    Tensor wt(host_allocator(), DType::kF32, {48, 64});
    std::mt19937_64 rng(4);
    std::uniform_real_distribution<float> u(-0.5f, 0.5f);
    for (int64_t i = 0; i < wt.view().numel(); ++i) wt.view().ptr<float>()[i] = u(rng);
    ops::QWeight w;
    w.data = wt.view();
    w.out_dim = 48, w.in_dim = 64;
    const std::vector<ops::KernelVariant> all = be.kernel_variants();
    std::vector<const ops::KernelVariant*> vs;
    for (const ops::KernelVariant& v : all)
        if (!v.fallback && (v.name == "exact" || v.name == "ulp100" || v.name == "fewer_rows"))
            vs.push_back(&v);
    ASSERT_EQ(vs.size(), 3u);
    const std::vector<runtime::ScreenRow> rows = runtime::screen_linear(be, vs, w, w, 300, rng);
    ASSERT_EQ(rows.size(), 3u);
    const std::map<std::string, std::string> expect = {
        {"exact", "pass"},
        {"ulp100", "fail: error"},
        {"fewer_rows", "fail: non-finite or unwritten outputs"}};
    for (const runtime::ScreenRow& r : rows) {
        EXPECT_EQ(r.verdict.rfind(expect.at(r.variant), 0), 0u) << r.variant << ": " << r.verdict;
        EXPECT_EQ(r.fallback_us, rows[0].fallback_us) << r.variant;
    }
}

// The native precision's linear cases (fp8 weights, the rows quantised for reference and candidate alike)
// are judged at the f32 bound too: the same planted variants are caught with the same reasons.
TEST(Screen, NativeLinearCasesCatchThePlantedVariants) {
    Planted be;
    const int64_t out = 48, in = 256;
    Tensor q(host_allocator(), DType::kF8E4M3, {out, in}), sc(host_allocator(), DType::kE8M0, {1, 2});
    std::mt19937_64 rng(4);
    for (int64_t i = 0; i < out * in; ++i) {
        uint8_t b = uint8_t(rng() % 256);
        if ((b & 0x7f) == 0x7f) b ^= 1;  // not NaN
        q.view().ptr<uint8_t>()[i] = b;
    }
    sc.view().ptr<uint8_t>()[0] = 120, sc.view().ptr<uint8_t>()[1] = 122;
    ops::QWeight w;
    w.format = ops::WeightFormat::kFp8Block, w.data = q.view(), w.scale = sc.view(), w.out_dim = out,
    w.in_dim = in;
    const std::map<std::string, std::string> expect = {{"exact", "pass"},
                                                       {"ulp100", "fail: error"},
                                                       {"fewer_rows", "fail: non-finite"},
                                                       {"noisy", "fail: two runs"},
                                                       {"batch_dependent", "fail: row 0 alone"},
                                                       {"silent", "skip"},
                                                       {"ulp100_stated", "pass"},
                                                       {"many_rows", "pass"},
                                                       {"many_rows_dependent", "fail: row 0 alone"}};
    for (const ops::KernelVariant& v : be.kernel_variants()) {
        if (v.fallback) continue;
        const runtime::ScreenRow r = runtime::screen_linear(be, v, w, w, 8, rng, ops::ActQuant::kFp8Block128);
        EXPECT_NE(r.shape.find("native"), std::string::npos) << r.shape;
        EXPECT_EQ(r.verdict.rfind(expect.at(v.name), 0), 0u) << v.name << ": " << r.verdict;
    }
}

// Planted variants of the stateful and mHC ops and of the fused pairs, screened on the tiny fixture's own
// shapes: a correct one passes; attention off by 100 ulp, a top-k with two ids swapped, an mhc_pre whose
// comb alone is off by 3e-5 (x's norm hides that in one error over all outputs: checked by hand), an
// hc_head that writes one row fewer, fused pairs off by 100 ulp in their second op's output only
// (mhc_pre_norm's norm, add_mhc_post's streams), and the row-wise ops and the compressor off by 100 ulp (the
// compressor in its window state only) each fail with their reason.
class PlantedOps final : public test::RefForwarding {
  public:
    std::string_view name() const override { return "planted_ops"; }
    std::vector<ops::KernelVariant> kernel_variants() const override {
        std::vector<ops::KernelVariant> v;
        for (const char* op : kPlantedOps) {
            v.push_back({op, "ref", "any", true});
            v.push_back({op, "exact", "any", false});
            v.push_back({op, "wrong", "any", false});
        }
        return v;
    }
    void set_allow_list(const ops::AllowList& l) override {
        active_.clear();
        for (const auto& v : kernel_variants())
            if (!v.fallback && l.allows(v.op, v.name)) active_[v.op] = v.name;
    }
    int64_t dispatch_count(std::string_view op, std::string_view v) const override {
        auto it = counts_.find(std::string(op) + "/" + std::string(v));
        return it == counts_.end() ? 0 : it->second;
    }
    void attention(const ops::AttentionArgs& a) override {
        ref().attention(a);
        if (wrong("attention"))
            for (int64_t i = 0; i < a.out.numel(); ++i) a.out.ptr<float>()[i] *= 1.0f + 100 * 0x1p-23f;
    }
    // The wrong attention also leaves the queries' norm out of a layer tail it is handed (a fused prologue
    // that loads q as it is): far above the native floor, so the tail rows must catch it.
    void attentions_stored(std::span<const ops::AttentionArgs> jobs,
                           std::span<const ops::WindowStoreArgs> stores, const ops::RopeArgs& out_rope,
                           const ops::QueryPrep* q_prep, const ops::ActQuantArgs* out_quant) override {
        auto it = active_.find("attention");
        const bool wrong_here = it != active_.end() && it->second == "wrong";
        if (q_prep != nullptr && wrong_here) {
            ref().rope(q_prep->rope);
            q_prep = nullptr;
        }
        Backend::attentions_stored(jobs, stores, out_rope, q_prep, out_quant);
        // and, handed several decode queries, gives the first the second's output (a batched launch reading
        // the wrong job's row of its table)
        const bool decodes = jobs.size() > 1 && std::all_of(jobs.begin(), jobs.end(),
                                                            [](const auto& a) { return a.q.shape[0] == 1; });
        if (wrong_here && decodes) std::memcpy(jobs[0].out.data, jobs[1].out.data, jobs[0].out.nbytes());
    }
    void indexer_topk(const ops::IndexerTopkArgs& a) override {
        ref().indexer_topk(a);
        if (wrong("indexer_topk") && a.picks.shape[1] > 1)
            std::swap(a.picks.ptr<int32_t>()[0], a.picks.ptr<int32_t>()[1]);
    }
    void mhc_pre(const ops::MhcPreArgs& a) override {
        ref().mhc_pre(a);
        if (wrong("mhc_pre"))
            for (int64_t t = 0; t < a.comb.shape[0]; ++t) a.comb.ptr<float>()[t * a.comb.stride[0]] += 3e-5f;
    }
    void hc_head(const ops::HcHeadArgs& a) override {
        ref().hc_head(a);
        if (wrong("hc_head")) {
            const int64_t n = a.out.shape[0];
            std::memset(a.out.ptr<float>() + (n - 1) * a.out.stride[0], 0xff,
                        size_t(a.out.shape[1]) * sizeof(float));
        }
    }

    void rms_norm_rope(const ops::RmsNormArgs& n, const ops::RopeArgs& r) override {
        ref().rms_norm_rope(n, r);
        if (wrong("rms_norm_rope")) off_by_100_ulp(n.y);
    }
    void mhc_pre_norm(const ops::MhcPreArgs& pre, const ops::RmsNormArgs& n) override {
        ref().mhc_pre_norm(pre, n);
        if (wrong("mhc_pre_norm")) off_by_100_ulp(n.y);
    }
    void hc_head_norm(const ops::HcHeadArgs& head, const ops::RmsNormArgs& n) override {
        ref().hc_head_norm(head, n);
        if (wrong("hc_head_norm")) off_by_100_ulp(n.y);
    }
    void add_mhc_post(const ops::AddArgs& sum, const ops::MhcPostArgs& post) override {
        ref().add_mhc_post(sum, post);
        if (wrong("add_mhc_post")) off_by_100_ulp(post.out);
    }
    void rms_norm(const ops::RmsNormArgs& a) override {
        ref().rms_norm(a);
        if (wrong("rms_norm")) off_by_100_ulp(a.y);
    }
    void rope(const ops::RopeArgs& a) override {
        ref().rope(a);
        if (wrong("rope")) off_by_100_ulp(a.x);
    }
    void swiglu(const ops::SwigluArgs& a) override {
        ref().swiglu(a);
        if (wrong("swiglu")) off_by_100_ulp(a.out);
    }
    void mhc_post(const ops::MhcPostArgs& a) override {
        ref().mhc_post(a);
        if (wrong("mhc_post")) off_by_100_ulp(a.out);
    }
    void compress(const ops::CompressArgs& a) override {  // the state only: each output is compared alone
        ref().compress(a);
        if (wrong("compress")) off_by_100_ulp(a.buf_kv);
    }
    static constexpr const char* kPlantedOps[] = {
        "attention",    "indexer_topk", "mhc_pre", "hc_head", "rms_norm_rope", "mhc_pre_norm", "hc_head_norm",
        "add_mhc_post", "rms_norm",     "rope",    "swiglu",  "mhc_post",      "compress"};

  private:
    static void off_by_100_ulp(const TensorView& v) {  // rows of a 2-d or 3-d view (strided rows)
        const int64_t rows = v.shape[0], per = v.numel() / rows;
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t i = 0; i < per; ++i) v.ptr<float>()[r * v.stride[0] + i] *= 1.0f + 100 * 0x1p-23f;
    }
    bool wrong(const std::string& op) {
        auto it = active_.find(op);
        if (it == active_.end()) return false;
        ++counts_[op + "/" + it->second];
        return it->second == "wrong";
    }
    std::map<std::string, std::string> active_;
    std::map<std::string, int64_t> counts_;
};

// Beside the model's own matrices, the screen runs the linear case table's screen cases (ops/op_cases.h):
// every one it can draw shows up, at its own row count, and passes on the cpu backend.
TEST(Screen, RunsTheCaseTablesLinearCases) {
    auto be = ops::make_cpu_backend(1);
    auto m = runtime::load_model(std::string(DI_TEST_DATA) + "/v4_tiny_fp32", *be);
    ASSERT_TRUE(m.ok()) << m.error().message;
    runtime::ScreenOptions o;
    o.ops = {"linear"};
    o.batches = {1};
    auto screened = runtime::screen_model(**m, o);
    ASSERT_TRUE(screened.ok()) << screened.error().message;
    int table_cases = 0;
    for (const ops::cases::LinearCase& c : ops::cases::linear_cases(ops::cases::kScreen)) {
        if (c.fmt == ops::WeightFormat::kFp4Group && c.in % 32 != 0) continue;  // not drawn
        ++table_cases;
        const std::string shape =
            std::to_string(c.out) + "x" + std::to_string(c.in) + ", n=" + std::to_string(c.n);
        int found = 0;
        for (const runtime::ScreenRow& r : screened->rows)
            if (r.shape.find(shape) != std::string::npos) {
                ++found;
                EXPECT_EQ(r.verdict, "pass") << c.name << ": " << r.verdict;
            }
        EXPECT_EQ(found, 1) << c.name << " (" << shape << ")";
    }
    EXPECT_GE(table_cases, 5);
}

TEST(Screen, PlantedStatefulAndMhcVariantsOnTheModelShapes) {
    PlantedOps be;
    auto m = runtime::load_model(std::string(DI_TEST_DATA) + "/v4_tiny_fp32", be);
    ASSERT_TRUE(m.ok()) << m.error().message;
    runtime::ScreenOptions o;
    o.ops = {std::begin(PlantedOps::kPlantedOps), std::end(PlantedOps::kPlantedOps)};
    o.batches = {1, 3};
    auto screened = runtime::screen_model(**m, o);
    ASSERT_TRUE(screened.ok()) << screened.error().message;
    const runtime::ScreenReport& rep = *screened;
    std::map<std::string, int> seen;
    // native attention's layer tail (attentions_stored with the queries prepared there): the exact variant's
    // rows, and the wrong variant's, which leaves the norm out there
    // and its decode batches (attentions_stored with 16 decode queries), where the wrong variant mixes up two
    int tail_rows = 0, wrong_tails = 0, batch_rows = 0, wrong_batches = 0;
    for (const runtime::ScreenRow& r : rep.rows) {
        ++seen[r.op + "/" + r.variant];
        const bool tail = r.op == "attention" && r.shape.find("layer tail") != std::string::npos;
        const bool batch = r.op == "attention" && r.shape.find("decode batch") != std::string::npos;
        tail_rows += tail && r.variant == "exact";
        batch_rows += batch && r.variant == "exact";
        if ((tail || batch) && r.variant == "wrong" && r.verdict.rfind("skip", 0) != 0) {
            EXPECT_EQ(r.verdict.rfind("fail: error", 0), 0u) << r.shape << ": " << r.verdict;
            ++(tail ? wrong_tails : wrong_batches);
        }
        if (r.variant == "exact") {
            EXPECT_EQ(r.verdict, "pass") << r.op << " " << r.shape;
            continue;
        }
        // Native attention's f16 permission is held to 2e-3 and native mhc_pre's TF32 one to 5e-3, above the
        // planted errors, and the indexer's may swap picks whose scores lie within the f16 bounds, as the
        // planted swap of the top two can (the rule itself: IndexerF16RuleAcceptsNearTiesOnly); the variant's
        // exact cases fail, which keeps it out of the list (checked below).
        if ((r.op == "attention" || r.op == "indexer_topk" || r.op == "mhc_pre") &&
            r.shape.find("native") != std::string::npos)
            continue;
        const std::string want = r.op == "indexer_topk" ? "fail: "
                                 : r.op == "hc_head"    ? "fail: non-finite"
                                                        : "fail: error";
        EXPECT_NE(r.verdict.rfind("skip", 0), 0u) << r.op << " " << r.shape << ": " << r.verdict;
        EXPECT_EQ(r.verdict.rfind(want, 0), 0u) << r.op << " " << r.shape << ": " << r.verdict;
    }
    EXPECT_GT(tail_rows, 0) << "no layer-tail rows";
    EXPECT_GT(wrong_tails, 0) << "no layer-tail row of the wrong variant was judged";
    EXPECT_GT(batch_rows, 0) << "no decode-batch rows";
    EXPECT_GT(wrong_batches, 0) << "no decode-batch row of the wrong variant was judged";
    for (const char* op : PlantedOps::kPlantedOps) {
        EXPECT_GT(seen[std::string(op) + "/wrong"], 0) << op << " was not screened";
        EXPECT_TRUE(rep.allow.allows(op, "exact")) << op;
        EXPECT_FALSE(rep.allow.allows(op, "wrong")) << op;
    }
}

// Every fast cpu kernel has screen cases on the model's shapes: screening every op leaves none of them out of
// the allow-list, so a user's `--kernels` file keeps the cpu backend as fast as its built-in list.
TEST(Screen, EveryCpuVariantIsScreened) {
    auto be = ops::make_cpu_backend(1);
    auto m = runtime::load_model(std::string(DI_TEST_DATA) + "/v4_tiny_fp32", *be);
    ASSERT_TRUE(m.ok()) << m.error().message;
    runtime::ScreenOptions o;
    o.batches = {1, 3};
    o.prefill_rows = 0;
    auto screened = runtime::screen_model(**m, o);
    ASSERT_TRUE(screened.ok()) << screened.error().message;
    std::map<std::string, int> rows;
    for (const runtime::ScreenRow& r : screened->rows) {
        ++rows[r.op + "/" + r.variant];
        EXPECT_TRUE(r.passed()) << r.op << " " << r.shape << ": " << r.verdict;
    }
    for (const ops::KernelVariant& v : be->kernel_variants()) {
        if (v.fallback) continue;
        EXPECT_GT(rows[v.op + "/" + v.name], 0) << v.op << "/" << v.name << " has no screen case";
        EXPECT_TRUE(screened->allow.allows(v.op, v.name)) << v.op << "/" << v.name;
    }
}

// The case table's attention cases (kScreen: odd head widths, partial rings, small rates, duplicate and -1
// picks) run beside the model's shapes: the correct planted variant passes each, the one off by 100 ulp
// fails each in the exact precision.
TEST(Screen, RunsTheCaseTablesAttentionCases) {
    PlantedOps be;
    auto m = runtime::load_model(std::string(DI_TEST_DATA) + "/v4_tiny_fp32", be);
    ASSERT_TRUE(m.ok()) << m.error().message;
    runtime::ScreenOptions o;
    o.ops = {"attention"};
    o.batches = {1};
    auto screened = runtime::screen_model(**m, o);
    ASSERT_TRUE(screened.ok()) << screened.error().message;
    int table_cases = 0;
    for (const ops::cases::AttentionCase& c : ops::cases::attention_cases(ops::cases::kScreen)) {
        ++table_cases;
        const std::string label = std::string("case ") + c.name + ":";
        std::map<std::string, int> found;
        for (const runtime::ScreenRow& r : screened->rows) {
            // native rows: the f16 permission's floor is above the planted error (as in the test above)
            if (r.shape.rfind(label, 0) != 0 || r.shape.find("native") != std::string::npos) continue;
            ++found[r.variant];
            EXPECT_EQ(r.verdict.rfind(r.variant == "exact" ? "pass" : "fail: error", 0), 0u)
                << c.name << " " << r.variant << ": " << r.verdict;
        }
        EXPECT_EQ(found["exact"], 1) << c.name;
        EXPECT_EQ(found["wrong"], 1) << c.name;
    }
    EXPECT_GE(table_cases, 4);
}

TEST(KernelsFile, StrictParsingAndDispatchObeysIt) {
    auto be = ops::make_cpu_backend(1);
    auto err = [&](const std::string& text) {
        auto r = runtime::parse_kernels_file(text, "k.json", *be);
        EXPECT_FALSE(r.ok()) << text;
        return r.ok() ? std::string() : r.error().message;
    };
    EXPECT_NE(err("{").find("k.json: invalid JSON"), std::string::npos);
    EXPECT_NE(err(R"({"backend": "cuda", "allow": []})")
                  .find("written for backend 'cuda', but this run uses 'cpu'"),
              std::string::npos);
    EXPECT_NE(err(R"({"backend": "cpu", "allow": [{"op": "convolve", "variant": "x"}]})")
                  .find("unknown op 'convolve'"),
              std::string::npos);
    EXPECT_NE(err(R"({"backend": "cpu", "allow": [{"op": "linear", "variant": "stream_gemv"}]})")
                  .find("op 'linear' has no variant 'stream_gemv' on cpu (cpu_simd, ref)"),
              std::string::npos);
    EXPECT_NE(err(R"({"backend": "cpu", "allow": [5]})").find("allow[0]"), std::string::npos);

    // Only the fallbacks allowed: linear runs the reference code, and the counters say so.
    auto none = runtime::parse_kernels_file(R"({"backend": "cpu", "allow": []})", "k.json", *be);
    ASSERT_TRUE(none.ok());
    be->set_allow_list(*none);
    Tensor x(host_allocator(), DType::kF32, {2, 32}), wt(host_allocator(), DType::kF32, {16, 32}),
        y(host_allocator(), DType::kF32, {2, 16});
    std::memset(x.view().data, 0, x.view().nbytes()), std::memset(wt.view().data, 0, wt.view().nbytes());
    ops::QWeight w;
    w.data = wt.view(), w.out_dim = 16, w.in_dim = 32;
    be->linear({x.view(), w, y.view()});
    EXPECT_EQ(be->dispatch_count("linear", "ref"), 1);
    EXPECT_EQ(be->dispatch_count("linear", "cpu_simd"), 0);
    auto simd = runtime::parse_kernels_file(
        R"({"backend": "cpu", "allow": [{"op": "linear", "variant": "cpu_simd"}]})", "k.json", *be);
    ASSERT_TRUE(simd.ok());
    be->set_allow_list(*simd);
    be->linear({x.view(), w, y.view()});
    EXPECT_EQ(be->dispatch_count("linear", "cpu_simd"), 1);
    // What screen writes reads back the same.
    auto again = runtime::parse_kernels_file(runtime::kernels_file_text(*simd), "k.json", *be);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->pairs(), simd->pairs());
}

// Ids as the screen compares them: their bits in floats.
std::vector<float> ids(std::initializer_list<int32_t> v) {
    std::vector<float> f;
    for (int32_t i : v) f.push_back(std::bit_cast<float>(i));
    return f;
}

// An exact (ids) compare counts every differing word, except those its `same` rule accepts: a rule that
// accepts one swap leaves a wrong id counted.
TEST(Screen, ExactCompareCountsOnlyTheDifferencesItsRuleDoesNotAccept) {
    const std::vector<float> ref = ids({5, 7, 9, 11});
    runtime::screen_detail::Compare cmp;
    cmp.exact = true;
    EXPECT_EQ(runtime::screen_detail::error_of(ids({5, 9, 7, 11}), ref, cmp), 0.5);
    cmp.same = [](size_t, float a, float b) {  // 7 and 9 are near-ties
        const int32_t x = std::bit_cast<int32_t>(a), y = std::bit_cast<int32_t>(b);
        return (x == 7 && y == 9) || (x == 9 && y == 7);
    };
    EXPECT_EQ(runtime::screen_detail::error_of(ids({5, 9, 7, 11}), ref, cmp), 0.0);
    EXPECT_EQ(runtime::screen_detail::error_of(ids({5, 9, 8, 11}), ref, cmp), 0.25);
    EXPECT_EQ(runtime::screen_detail::error_of(ref, ref, cmp), 0.0);
}

// The indexer's rule under the f16 permission: near-tied picks may swap or trade places at the cut, a pick
// worse than a missed entry beyond the bounds, a lost pick or picks out of order are counted.
TEST(Screen, IndexerF16RuleAcceptsNearTiesOnly) {
    // entry e's score and bound: 10, 9.995, 9.99, 5, 1 for e = 0..4, each within 0.01
    const double scores[] = {10.0, 9.995, 9.99, 5.0, 1.0};
    const auto score = [&](int64_t, int64_t e, double& bound) {
        bound = 0.01;
        return scores[e];
    };
    using runtime::screen_detail::indexer_f16_bad;
    const std::vector<int32_t> ref = {0, 1, 3};  // query 0 picks 0, 1, 3 (ref's own near-tie call)
    EXPECT_EQ(indexer_f16_bad(ref, ref, 1, 3, score), 0u);
    EXPECT_EQ(indexer_f16_bad({1, 0, 3}, ref, 1, 3, score), 0u);   // a near-tied swap
    EXPECT_EQ(indexer_f16_bad({0, 2, 3}, ref, 1, 3, score), 0u);   // 2 in for 1: within the bounds
    EXPECT_EQ(indexer_f16_bad({0, 1, 4}, ref, 1, 3, score), 1u);   // 4 in for 3: far worse
    EXPECT_EQ(indexer_f16_bad({0, 3, 1}, ref, 1, 3, score), 1u);   // 3 before 1: out of order
    EXPECT_EQ(indexer_f16_bad({0, 1, -1}, ref, 1, 3, score), 3u);  // a pick lost: the query's k
    // through error_of: the whole-output rule takes the place of the word-by-word count
    const runtime::screen_detail::Compare cmp = runtime::screen_detail::indexer_f16_compare(3, score);
    EXPECT_EQ(runtime::screen_detail::error_of(ids({0, 2, 3}), ids({0, 1, 3}), cmp), 0.0);
    EXPECT_DOUBLE_EQ(runtime::screen_detail::error_of(ids({0, 1, 4}), ids({0, 1, 3}), cmp), 1.0 / 3.0);
}

}  // namespace
}  // namespace di
