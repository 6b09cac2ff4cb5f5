#include "runtime/backend_factory.h"

#include <fmt/ranges.h>

#include "ops/cpu/cpu_backend.h"
#include "ops/ref/ref_backend.h"
#ifdef DEEPINFER_WITH_CUDA
#include "ops/cuda/cuda_backend.h"
#endif

namespace di::runtime {

std::vector<std::string> backend_names() {
    std::vector<std::string> names{"ref", "cpu"};
#ifdef DEEPINFER_WITH_CUDA
    names.push_back("cuda");
#endif
    return names;
}

BackendChoice resolve_backend(const std::string& name) {
    if (name != "auto") return {name, "asked for"};
#ifdef DEEPINFER_WITH_CUDA
    if (ops::cuda_device_count() > 0) return {"cuda", "auto: a CUDA device is present"};
    return {"cpu", "auto: no CUDA device found"};
#else
    return {"cpu", "auto: this build has no CUDA backend"};
#endif
}

Result<std::unique_ptr<ops::Backend>> make_backend(const std::string& requested) {
    return make_backend_on(requested, 0);
}

Result<std::unique_ptr<ops::Backend>> make_backend_on(const std::string& requested, int device) {
    const std::string name = resolve_backend(requested).name;
    if (name == "ref") return ops::make_ref_backend();
    if (name == "cpu") return ops::make_cpu_backend();
#ifdef DEEPINFER_WITH_CUDA
    if (name == "cuda") {
        const int have = ops::cuda_device_count();
        if (device < 0 || device >= have)
            return make_error(ErrorCode::kInvalidArgument, "GPU {} asked for, {} present", device, have);
        return ops::make_cuda_backend(device);
    }
#endif
    (void)device;  // host backends
    return make_error(ErrorCode::kUnsupported, "unknown backend '{}' (this build has: {}, or auto)", name,
                      fmt::join(backend_names(), ", "));
}

}  // namespace di::runtime
