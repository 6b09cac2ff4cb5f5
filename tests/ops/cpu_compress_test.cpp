// The KV compressor on cpu vs ref, bit for bit: the entries of the windows a chunk closes and the state it
// leaves (buffered open-window tokens, the overlap half), over the compressor case table (HCA and CSA,
// windows closing at the chunk's first token, w = 0's empty overlap half, odd widths and rates; the larger
// cases split over the pool, the smaller in one task).
#include <cstring>

#include "cpu_test_util.h"
#include "ops/op_cases.h"

namespace di::cputest {
namespace {

using ops::cases::CompressCase;

struct CompressTensors {
    Tensor kv, gate, bias, bkv, bgate, okv, ogate, out;
};

CompressTensors make(const CompressCase& c) {
    const int64_t width = c.overlap ? 2 * c.d : c.d, n_new = ops::CompressArgs::n_new(c.pos0, c.L, c.rate);
    CompressTensors t;
    auto f32 = [](std::initializer_list<int64_t> shape) {
        return Tensor(host_allocator(), DType::kF32, shape);
    };
    t.kv = f32({c.L, width}), t.gate = f32({c.L, width}), t.bias = f32({c.rate, width});
    t.bkv = f32({c.rate, width}), t.bgate = f32({c.rate, width});
    t.okv = f32({c.rate, c.d}), t.ogate = f32({c.rate, c.d});
    t.out = f32({std::max<int64_t>(n_new, 1), c.d});
    fill_uniform(t.kv), fill_uniform(t.gate, -3, 3), fill_uniform(t.bias), fill_uniform(t.bkv);
    fill_uniform(t.bgate, -3, 3), fill_uniform(t.okv), fill_uniform(t.ogate, -3, 3);
    poison(t.out);
    return t;
}

CompressTensors copy(const CompressTensors& s) {
    auto dup = [](const Tensor& x) {
        Tensor y(host_allocator(), DType::kF32, {x.view().numel()});
        std::memcpy(y.view().data, x.view().data, x.view().nbytes());
        return y;
    };
    return {dup(s.kv),    dup(s.gate), dup(s.bias),  dup(s.bkv),
            dup(s.bgate), dup(s.okv),  dup(s.ogate), dup(s.out)};
}

ops::CompressArgs args(const CompressCase& c, const CompressTensors& t) {
    const int64_t width = c.overlap ? 2 * c.d : c.d, n_new = ops::CompressArgs::n_new(c.pos0, c.L, c.rate);
    auto v2 = [](const Tensor& x, int64_t rows, int64_t cols) {
        return TensorView::contiguous(x.view().data, DType::kF32, {rows, cols});
    };
    ops::CompressArgs a;
    a.kv = v2(t.kv, c.L, width), a.gate = v2(t.gate, c.L, width), a.bias = v2(t.bias, c.rate, width);
    a.buf_kv = v2(t.bkv, c.rate, width), a.buf_gate = v2(t.bgate, c.rate, width);
    if (c.overlap) a.ovl_kv = v2(t.okv, c.rate, c.d), a.ovl_gate = v2(t.ogate, c.rate, c.d);
    a.out = v2(t.out, std::max<int64_t>(n_new, 1), c.d).rows(0, n_new);
    a.pos0 = c.pos0, a.rate = c.rate, a.overlap = c.overlap;
    return a;
}

bool same(const Tensor& x, const Tensor& y) {
    return std::memcmp(x.view().data, y.view().data, size_t(x.view().numel()) * 4) == 0;
}

class CpuCompress : public ::testing::TestWithParam<CompressCase> {};

TEST_P(CpuCompress, EqualsRefBitForBitIncludingState) {
    const CompressCase& c = GetParam();
    const CompressTensors ref_t = make(c);
    const CompressTensors cpu_t = copy(ref_t);
    backends().ref->compress(args(c, ref_t));
    backends().cpu->compress(args(c, cpu_t));
    EXPECT_TRUE(same(ref_t.out, cpu_t.out)) << c.name << ": entries";
    EXPECT_TRUE(same(ref_t.bkv, cpu_t.bkv) && same(ref_t.bgate, cpu_t.bgate)) << c.name << ": open window";
    EXPECT_TRUE(same(ref_t.okv, cpu_t.okv) && same(ref_t.ogate, cpu_t.ogate)) << c.name << ": overlap half";
}

INSTANTIATE_TEST_SUITE_P(Cases, CpuCompress, ::testing::ValuesIn(ops::cases::compress_cases()),
                         [](const ::testing::TestParamInfo<CompressCase>& i) {
                             return std::string(i.param.name);
                         });

}  // namespace
}  // namespace di::cputest
