#include "io/finite_scan.h"

#include <fmt/format.h>

#include <cstring>

#include "io/json_text.h"

namespace di::io {
namespace {

// Index of the first element whose exponent field (`mask` over `bytes`-wide little-endian words) is all
// ones, i.e. NaN or infinity; -1 when none. Branch-free over blocks so the common, clean case streams.
template <typename Word>
int64_t first_all_ones(const uint8_t* data, size_t n, Word mask) {
    constexpr size_t kBlock = 4096;
    for (size_t b = 0; b < n; b += kBlock) {
        const size_t end = std::min(n, b + kBlock);
        bool hit = false;
        for (size_t i = b; i < end; ++i) {
            Word w;
            std::memcpy(&w, data + i * sizeof(Word), sizeof(Word));
            hit |= (w & mask) == mask;
        }
        if (!hit) continue;
        for (size_t i = b; i < end; ++i) {
            Word w;
            std::memcpy(&w, data + i * sizeof(Word), sizeof(Word));
            if ((w & mask) == mask) return int64_t(i);
        }
    }
    return -1;
}

}  // namespace

Status check_tensor_finite(const TensorEntry& e) {
    int64_t bad = -1;
    const std::string& t = e.st_dtype;
    if (t == "F32")
        bad = first_all_ones<uint32_t>(e.data, e.nbytes / 4, 0x7f800000u);
    else if (t == "BF16")
        bad = first_all_ones<uint16_t>(e.data, e.nbytes / 2, uint16_t(0x7f80));
    else if (t == "F16")
        bad = first_all_ones<uint16_t>(e.data, e.nbytes / 2, uint16_t(0x7c00));
    else if (t == "F8_E4M3")  // e4m3fn: no infinities, NaN is S.1111.111
        bad = first_all_ones<uint8_t>(e.data, e.nbytes, uint8_t(0x7f));
    else if (t == "F8_E8M0")  // unsigned exponent only: 0xff is NaN
        bad = first_all_ones<uint8_t>(e.data, e.nbytes, uint8_t(0xff));
    if (bad < 0) return ok_status();
    return make_error(ErrorCode::kFormat, "{}: tensor {} ({}) holds a NaN or infinity at flat index {}",
                      e.file, io::quoted(e.name), t, bad);
}

Status check_checkpoint_finite(const Checkpoint& ck) {
    for (const auto& [name, e] : ck.tensors()) DI_TRY_STATUS(check_tensor_finite(e));
    return ok_status();
}

}  // namespace di::io
