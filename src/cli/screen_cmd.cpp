// deepinfer screen: A/B-tests every non-fallback kernel variant of a backend on a model's own shapes against
// the reference backend (runtime/screen.h says how), prints the table and writes the allow-list that
// `--kernels FILE` loads. Exit code 0 when the screen ran (failed variants are left out of the list, not an
// error), 1 on bad input.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli/command.h"
#include "cli/generate_common.h"
#include "demo/presets.h"
#include "runtime/backend_factory.h"
#include "runtime/kernels_file.h"
#include "runtime/model_loader.h"
#include "runtime/screen.h"

namespace di::cli {
namespace {

struct Options : GenOptions {
    std::string ops = fmt::format("{}", fmt::join(runtime::ScreenOptions{}.ops, ","));  // every op screened
    std::string batches = "1,8,64", out, markdown;
    std::string preset;  // a random-weight shape (demo/presets.h) instead of --model
    int64_t layers = 4;  // of the preset: V4-Flash's first four hold every attention type
    int64_t prefill_rows = -1;
};

std::vector<std::string> split(const std::string& s) {
    std::vector<std::string> v;
    std::stringstream ss(s);
    for (std::string item; std::getline(ss, item, ',');)
        if (!item.empty()) v.push_back(item);
    return v;
}

// The preset's random weights drawn in memory and bound to the backend (no checkpoint on disk: V4-Flash's
// layers are gigabytes each).
Result<LoadedModel> load_preset(const Options& o) {
    DI_TRY(const demo::RandomModelSpec spec, demo::preset_spec(o.preset, o.layers));
    DI_TRY(demo::RandomModel random, demo::random_model_in_memory(spec));
    LoadedModel lm;
    DI_TRY(lm.backend, make_backend_for(o));
    DI_TRY(lm.model, runtime::load_model_in_memory(random.config_json, random.checkpoint, *lm.backend));
    return lm;
}

int run_screen(Options& o) {
    runtime::ScreenOptions so;
    so.ops = split(o.ops);
    const runtime::ScreenOptions all;
    for (const std::string& op : so.ops)
        if (std::find(all.ops.begin(), all.ops.end(), op) == all.ops.end())
            return fail(fmt::format("screen: --ops: {} has no variants to screen ({})", op,
                                    fmt::join(all.ops, ", ")));
    so.prefill_rows = o.prefill_rows;
    so.batches.clear();
    for (const std::string& b : split(o.batches)) {
        char* end = nullptr;
        const long long n = std::strtoll(b.c_str(), &end, 10);
        if (*end != '\0' || n < 1 || n > 4096)
            return fail(fmt::format("screen: --batches: '{}' is not in [1, 4096]", b));
        so.batches.push_back(n);
    }
    if (!o.preset.empty() && !o.model.empty()) return fail("screen: --preset and --model exclude each other");
    auto lm = o.preset.empty() ? load_for_generation(o) : load_preset(o);
    if (!lm) return fail(lm.error().message);
    auto screened = runtime::screen_model(*lm->model, so);
    if (!screened) return fail(screened.error().message);
    const runtime::ScreenReport& rep = *screened;
    int pass = 0, failed = 0, skip = 0;
    for (const auto& r : rep.rows) (r.passed() ? pass : r.verdict.rfind("fail", 0) == 0 ? failed : skip)++;
    const std::string md =
        rep.table() + fmt::format("\n{} cases on backend {}: {} pass, {} fail, {} skip, {:.1f} s\n",
                                  rep.rows.size(), runtime::resolve_backend(o.backend).name, pass, failed,
                                  skip, rep.seconds);
    std::fputs(md.c_str(), stdout);
    std::string allowed;
    for (const auto& [op, v] : rep.allow.pairs()) allowed += fmt::format(" {}/{}", op, v);
    fmt::print("allow-list:{}\n", allowed);
    std::string unscreened;
    for (const ops::KernelVariant& v : lm->backend->kernel_variants())
        if (!v.fallback && !rep.allow.allows(v.op, v.name) &&
            std::find(so.ops.begin(), so.ops.end(), v.op) == so.ops.end())
            unscreened += fmt::format(" {}/{}", v.op, v.name);
    if (!unscreened.empty())
        fmt::print("not screened, so left out of the list (their ops run the fallback with it):{}\n",
                   unscreened);
    if (!o.markdown.empty() && !(std::ofstream(o.markdown) << md))
        return fail("screen: cannot write " + o.markdown);
    if (!o.out.empty()) {
        if (!(std::ofstream(o.out) << runtime::kernels_file_text(rep.allow)))
            return fail("screen: cannot write " + o.out);
        fmt::print("wrote {} (use it with --kernels)\n", o.out);
    }
    return 0;
}

std::function<int()> setup(CLI::App& app) {
    auto o = std::make_shared<Options>();
    add_model_options(app, *o);
    app.add_option("--ops", o->ops, "ops to screen, comma separated")->capture_default_str();
    app.add_option("--batches", o->batches, "token rows per case, comma separated")->capture_default_str();
    app.add_option("--prefill-rows", o->prefill_rows,
                   "the linear and MoE cases also at this many rows, where the prefill variants run (0: not; "
                   "-1: 512 on cuda, none on cpu and ref)")
        ->check(CLI::Range(int64_t(-1), int64_t(4096)))
        ->capture_default_str();
    app.add_option("--out", o->out, "write the allow-list (kernels JSON) here");
    app.add_option("--markdown", o->markdown, "write the table here too");
    app.add_option("--preset", o->preset, "screen a random-weight model of this shape instead (mid, flash)");
    app.add_option("--layers", o->layers, "layers of --preset flash")->capture_default_str();
    return [o] { return run_screen(*o); };
}

}  // namespace

DI_COMMAND("screen", "Test every fast kernel variant on the model's own shapes and write an allow-list",
           setup);

}  // namespace di::cli
