#include "core/dtype.h"

namespace di {

size_t dtype_size(DType t) {
    switch (t) {
        case DType::kF32:
        case DType::kI32:
            return 4;
        case DType::kBF16:
        case DType::kF16:
            return 2;
        case DType::kI64:
            return 8;
        case DType::kF8E4M3:
        case DType::kE8M0:
        case DType::kFP4x2:
        case DType::kI8:
        case DType::kU8:
            return 1;
    }
    return 0;
}

std::string_view dtype_name(DType t) {
    switch (t) {
        case DType::kF32:
            return "f32";
        case DType::kBF16:
            return "bf16";
        case DType::kF16:
            return "f16";
        case DType::kF8E4M3:
            return "f8_e4m3";
        case DType::kE8M0:
            return "e8m0";
        case DType::kFP4x2:
            return "fp4_e2m1x2";
        case DType::kI8:
            return "i8";
        case DType::kU8:
            return "u8";
        case DType::kI32:
            return "i32";
        case DType::kI64:
            return "i64";
    }
    return "?";
}

bool dtype_is_float(DType t) { return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16; }

float f16_to_f32(uint16_t h) {
    const int sign = h >> 15, e = (h >> 10) & 0x1F, m = h & 0x3FF;
    float mag;
    if (e == 0)
        mag = std::ldexp(float(m), -24);
    else if (e == 31)
        mag = m ? NAN : INFINITY;
    else
        mag = std::ldexp(1.0f + float(m) / 1024.0f, e - 15);
    return sign ? -mag : mag;
}

}  // namespace di
