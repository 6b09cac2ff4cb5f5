// The NCCL group on this host's GPUs: all_reduce_sum, all_gather, barrier, exchange_counts and all_to_all
// on every rank (one rank on a
// one-GPU machine: the sum of one is itself), and a failed rank's later collectives end with its message.
#include "parallel/nccl/nccl_group.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <thread>

namespace di::parallel {
namespace {

using namespace std::chrono_literals;

int devices() {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

TEST(NcclGroup, CollectivesOnEveryGpu) {
    const int n = devices();
    if (n == 0) GTEST_SKIP() << "no CUDA device";
    auto group = make_nccl_group(n, 60s);
    ASSERT_TRUE(group.ok()) << group.error().message;
    constexpr int kN = 4097;
    std::vector<std::vector<float>> sums(static_cast<size_t>(n)), gathered(static_cast<size_t>(n));
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r)
        threads.emplace_back([&, r] {
            Communicator& c = *(*group)[size_t(r)];
            cudaSetDevice(r);
            std::vector<float> h(kN);
            for (int i = 0; i < kN; ++i) h[size_t(i)] = float(r + 1) * float(i % 97) - 3.0f;
            float *buf = nullptr, *all = nullptr;
            cudaMalloc(&buf, kN * sizeof(float));
            cudaMalloc(&all, size_t(n) * kN * sizeof(float));
            cudaMemcpy(buf, h.data(), kN * sizeof(float), cudaMemcpyHostToDevice);
            const TensorView v = TensorView::contiguous(buf, DType::kF32, {kN}, Device::kCuda);
            const TensorView a = TensorView::contiguous(all, DType::kF32, {int64_t(n) * kN}, Device::kCuda);
            EXPECT_TRUE(c.all_gather(v, a).ok());
            const Status s = c.all_reduce_sum(v);
            EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.error().message);
            EXPECT_TRUE(c.barrier().ok());
            sums[size_t(r)].resize(kN), gathered[size_t(r)].resize(size_t(n) * kN);
            cudaMemcpy(sums[size_t(r)].data(), buf, kN * sizeof(float), cudaMemcpyDeviceToHost);
            cudaMemcpy(gathered[size_t(r)].data(), all, size_t(n) * kN * sizeof(float),
                       cudaMemcpyDeviceToHost);
            cudaFree(buf), cudaFree(all);
        });
    for (auto& t : threads) t.join();
    for (int r = 0; r < n; ++r)
        for (int i = 0; i < kN; ++i) {
            float want = 0;  // small integers: exact in any order
            for (int q = 0; q < n; ++q) want += float(q + 1) * float(i % 97) - 3.0f;
            ASSERT_EQ(sums[size_t(r)][size_t(i)], want) << "rank " << r << " i " << i;
            for (int q = 0; q < n; ++q)
                ASSERT_EQ(gathered[size_t(r)][size_t(q) * kN + size_t(i)],
                          float(q + 1) * float(i % 97) - 3.0f);
        }
}

// Rank r sends r + q + 1 values to rank q (itself included), each naming sender, receiver and index.
TEST(NcclGroup, AllToAllOnEveryGpu) {
    const int n = devices();
    if (n == 0) GTEST_SKIP() << "no CUDA device";
    auto group = make_nccl_group(n, 60s);
    ASSERT_TRUE(group.ok()) << group.error().message;
    std::vector<std::vector<int32_t>> got(static_cast<size_t>(n));
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r)
        threads.emplace_back([&, r] {
            Communicator& c = *(*group)[size_t(r)];
            cudaSetDevice(r);
            const auto ranks = static_cast<size_t>(n);
            std::vector<int64_t> to(ranks), to_bytes(ranks), from_bytes(ranks);
            std::vector<int32_t> send;
            for (int q = 0; q < n; ++q) {
                to[size_t(q)] = r + q + 1, to_bytes[size_t(q)] = 4 * (r + q + 1);
                for (int i = 0; i <= r + q; ++i) send.push_back(1000 * r + 100 * q + i);
            }
            auto from = c.exchange_counts(to);
            ASSERT_TRUE(from.ok()) << from.error().message;
            int64_t total = 0;
            for (int q = 0; q < n; ++q) {
                EXPECT_EQ((*from)[size_t(q)], q + r + 1);
                from_bytes[size_t(q)] = 4 * (*from)[size_t(q)], total += (*from)[size_t(q)];
            }
            int32_t *sd = nullptr, *rd = nullptr;
            cudaMalloc(&sd, send.size() * 4), cudaMalloc(&rd, size_t(total) * 4);
            cudaMemcpy(sd, send.data(), send.size() * 4, cudaMemcpyHostToDevice);
            const Status s = c.all_to_all(
                TensorView::contiguous(sd, DType::kI32, {int64_t(send.size())}, Device::kCuda), to_bytes,
                TensorView::contiguous(rd, DType::kI32, {total}, Device::kCuda), from_bytes);
            EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.error().message);
            got[size_t(r)].resize(size_t(total));
            cudaMemcpy(got[size_t(r)].data(), rd, size_t(total) * 4, cudaMemcpyDeviceToHost);
            cudaFree(sd), cudaFree(rd);
        });
    for (auto& t : threads) t.join();
    for (int r = 0; r < n; ++r) {
        std::vector<int32_t> want;
        for (int q = 0; q < n; ++q)
            for (int i = 0; i <= q + r; ++i) want.push_back(1000 * q + 100 * r + i);
        EXPECT_EQ(got[size_t(r)], want) << "rank " << r;
    }
}

TEST(NcclGroup, AFailedRankRefusesLaterCollectives) {
    if (devices() == 0) GTEST_SKIP() << "no CUDA device";
    auto group = make_nccl_group(1, 60s);
    ASSERT_TRUE(group.ok()) << group.error().message;
    Communicator& c = *(*group)[0];
    c.fail("out of device memory");
    const Status s = c.barrier();
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.error().message.find("rank 0 failed: out of device memory"), std::string::npos)
        << s.error().message;
}

TEST(NcclGroup, MoreGpusThanPresentIsAnError) {
    const int n = devices();
    if (n == 0) GTEST_SKIP() << "no CUDA device";
    auto group = make_nccl_group(n + 1, 1s);
    ASSERT_FALSE(group.ok());
    EXPECT_NE(group.error().message.find("GPUs asked for"), std::string::npos) << group.error().message;
}

}  // namespace
}  // namespace di::parallel
