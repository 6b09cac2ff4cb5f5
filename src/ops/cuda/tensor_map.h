// TMA tensor maps (CUtensorMap, 128 bytes each) for kernels that load 2-D boxes with one instruction
// (wg::tma_load_2d). The driver's encoder is looked up at run time through the runtime API, so no binary
// links the driver library.
#pragma once

#include <cstdint>

namespace di::cuda {

constexpr int64_t kTensorMapBytes = 128;

// A map of a row-major byte matrix [rows][row_bytes] at `data` (rows `ld` bytes apart) whose boxes are
// box_bytes x box_rows with the 64-byte swizzle (the 16-byte unit u of row r lands at unit u ^ ((r / 2) % 4)
// of the box's row: the layout moe_w4a8_bulk_ss's converters read), written to map (kTensorMapBytes, 64-byte
// aligned). False, with map untouched, where the driver lacks the encoder or the layout breaks its rules
// (data 16-byte aligned, ld a multiple of 16, box_bytes <= 64).
bool encode_byte_rows_map(void* map, const void* data, int64_t rows, int64_t row_bytes, int64_t ld,
                          int box_bytes, int box_rows);

}  // namespace di::cuda
