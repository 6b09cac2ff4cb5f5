// The local communicator group: every rank gets the rank-order sum bit for bit (against a sum written
// here), gathers in rank order, exchanges counts and variable-sized parts (all_to_all), and a rank that fails
// or never arrives ends its peers' collectives with an error naming the cause within the timeout.
#include "parallel/communicator.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>

namespace di::parallel {
namespace {

using namespace std::chrono_literals;

// Runs body(rank, comm) on one thread per rank and joins them.
template <class Body>
void on_ranks(std::vector<std::unique_ptr<Communicator>>& comms, Body body) {
    std::vector<std::thread> threads;
    for (size_t r = 0; r < comms.size(); ++r) threads.emplace_back([&, r] { body(int(r), *comms[r]); });
    for (auto& t : threads) t.join();
}

// Each test runs on host memory and with a device copy (how ranks on one GPU exchange device memory), through
// which every byte then moves.
class LocalCommunicatorCopy : public testing::TestWithParam<bool> {
  protected:
    MemoryCopy copy() {
        if (!GetParam()) return {};
        return [this](void* dst, const void* src, size_t bytes) {
            std::memcpy(dst, src, bytes);
            copied += int64_t(bytes);
        };
    }
    std::atomic<int64_t> copied{0};
};

TEST_P(LocalCommunicatorCopy, AllReduceIsTheRankOrderSumOnEveryRank) {
    constexpr int kRanks = 4, kN = 1000, kRounds = 30;
    auto comms = make_local_group(kRanks, 10s, copy());
    EXPECT_EQ(comms[0]->device_memory(), GetParam());
    // inputs[round][rank]: values of mixed magnitude, so a different addition order would change bits
    std::vector<std::vector<std::vector<float>>> in(kRounds, std::vector<std::vector<float>>(kRanks));
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (auto& round : in)
        for (int r = 0; r < kRanks; ++r)
            for (int i = 0; i < kN; ++i)
                round[size_t(r)].push_back(u(rng) * std::ldexp(1.0f, (i + r * 7) % 40 - 20));
    std::vector<std::vector<std::vector<float>>> out = in;
    on_ranks(comms, [&](int r, Communicator& c) {
        EXPECT_EQ(c.rank(), r);
        EXPECT_EQ(c.size(), kRanks);
        for (int k = 0; k < kRounds; ++k) {
            std::vector<float>& buf = out[size_t(k)][size_t(r)];
            const Status s = c.all_reduce_sum(TensorView::contiguous(buf.data(), DType::kF32, {kN}));
            EXPECT_TRUE(s.ok()) << s.error().message;
        }
    });
    for (int k = 0; k < kRounds; ++k)
        for (int i = 0; i < kN; ++i) {
            float want = in[size_t(k)][0][size_t(i)];
            for (int r = 1; r < kRanks; ++r) want += in[size_t(k)][size_t(r)][size_t(i)];
            for (int r = 0; r < kRanks; ++r)
                ASSERT_EQ(out[size_t(k)][size_t(r)][size_t(i)], want)
                    << "round " << k << " rank " << r << " i " << i;
        }
    // each rank reads every rank's buffer and writes its own
    EXPECT_EQ(copied.load(), GetParam() ? int64_t(kRounds) * kRanks * (kRanks + 1) * kN * 4 : 0);
}

TEST(LocalCommunicator, AllGatherIsInRankOrder) {
    constexpr int kRanks = 3;
    auto comms = make_local_group(kRanks, 10s);
    std::vector<std::vector<int32_t>> got(kRanks, std::vector<int32_t>(kRanks * 5, -1));
    on_ranks(comms, [&](int r, Communicator& c) {
        std::vector<int32_t> mine(5);
        for (int i = 0; i < 5; ++i) mine[size_t(i)] = 100 * r + i;
        const Status s =
            c.all_gather(TensorView::contiguous(mine.data(), DType::kI32, {5}),
                         TensorView::contiguous(got[size_t(r)].data(), DType::kI32, {kRanks * 5}));
        EXPECT_TRUE(s.ok()) << s.error().message;
        EXPECT_TRUE(c.barrier().ok());
    });
    for (int r = 0; r < kRanks; ++r)
        for (int q = 0; q < kRanks; ++q)
            for (int i = 0; i < 5; ++i) EXPECT_EQ(got[size_t(r)][size_t(q * 5 + i)], 100 * q + i);
}

// Rank r sends (r + 2q) % 4 values to rank q (some pairs nothing, itself included), each value naming its
// sender, receiver and index: every rank learns the counts, then receives exactly its values in rank order.
TEST_P(LocalCommunicatorCopy, AllToAllDeliversEachRanksPartInRankOrder) {
    constexpr int kRanks = 4;
    auto comms = make_local_group(kRanks, 10s, copy());
    auto count = [](int from, int to) { return int64_t((from + 2 * to) % 4); };
    std::vector<std::vector<int32_t>> got(kRanks);
    on_ranks(comms, [&](int r, Communicator& c) {
        std::vector<int64_t> to(kRanks), to_bytes(kRanks);
        std::vector<int32_t> send;
        for (int q = 0; q < kRanks; ++q) {
            to[size_t(q)] = count(r, q);
            to_bytes[size_t(q)] = count(r, q) * 4;
            for (int i = 0; i < count(r, q); ++i) send.push_back(1000 * r + 100 * q + i);
        }
        auto from = c.exchange_counts(to);
        ASSERT_TRUE(from.ok()) << from.error().message;
        std::vector<int64_t> from_bytes(kRanks);
        int64_t total = 0;
        for (int q = 0; q < kRanks; ++q) {
            EXPECT_EQ((*from)[size_t(q)], count(q, r)) << "rank " << r << " from " << q;
            from_bytes[size_t(q)] = (*from)[size_t(q)] * 4;
            total += (*from)[size_t(q)];
        }
        got[size_t(r)].assign(size_t(total), -1);
        const TensorView sv = send.empty()
                                  ? TensorView{}
                                  : TensorView::contiguous(send.data(), DType::kI32, {int64_t(send.size())});
        const TensorView rv =
            total == 0 ? TensorView{} : TensorView::contiguous(got[size_t(r)].data(), DType::kI32, {total});
        const Status s = c.all_to_all(sv, to_bytes, rv, from_bytes);
        EXPECT_TRUE(s.ok()) << s.error().message;
    });
    for (int r = 0; r < kRanks; ++r) {
        std::vector<int32_t> want;
        for (int q = 0; q < kRanks; ++q)
            for (int i = 0; i < count(q, r); ++i) want.push_back(1000 * q + 100 * r + i);
        EXPECT_EQ(got[size_t(r)], want) << "rank " << r;
    }
    int64_t bytes = 0;  // every value moved once
    for (int r = 0; r < kRanks; ++r)
        for (int q = 0; q < kRanks; ++q) bytes += 4 * count(r, q);
    EXPECT_EQ(copied.load(), GetParam() ? bytes : 0);
}

INSTANTIATE_TEST_SUITE_P(HostAndDevice, LocalCommunicatorCopy, testing::Bool());

TEST(LocalCommunicator, AFailedRankEndsItsPeersCollectives) {
    auto comms = make_local_group(3, 60s);  // far longer than the test may take: the failure must end it
    std::vector<std::string> errors(3);
    const auto t0 = std::chrono::steady_clock::now();
    on_ranks(comms, [&](int r, Communicator& c) {
        if (r == 2) {
            std::this_thread::sleep_for(50ms);
            c.fail("out of device memory");
            return;
        }
        float v = 1.0f;
        const Status s = c.all_reduce_sum(TensorView::contiguous(&v, DType::kF32, {1}));
        if (!s.ok()) errors[size_t(r)] = s.error().message;
    });
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
    for (int r = 0; r < 2; ++r) {
        EXPECT_NE(errors[size_t(r)].find("all_reduce_sum"), std::string::npos) << errors[size_t(r)];
        EXPECT_NE(errors[size_t(r)].find("rank 2 failed: out of device memory"), std::string::npos)
            << errors[size_t(r)];
    }
    EXPECT_FALSE(comms[0]->barrier().ok());  // and every later collective
}

TEST(LocalCommunicator, ARankThatNeverArrivesTimesOut) {
    auto comms = make_local_group(2, 200ms);
    Status s = ok_status();
    const auto t0 = std::chrono::steady_clock::now();
    std::thread t([&] { s = comms[0]->barrier(); });  // rank 1 never calls it
    t.join();
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.error().message.find("barrier"), std::string::npos) << s.error().message;
    EXPECT_NE(s.error().message.find("waited 200 ms for 1 of 2 ranks"), std::string::npos)
        << s.error().message;
    EXPECT_FALSE(comms[1]->barrier().ok());  // the group is broken for the late rank too
}

TEST(LocalCommunicator, OneRankIsItsOwnGroup) {
    auto comms = make_local_group(1, 1s);
    float v[3] = {1, 2, 3};
    ASSERT_TRUE(comms[0]->all_reduce_sum(TensorView::contiguous(v, DType::kF32, {3})).ok());
    EXPECT_EQ(v[0], 1.0f);
    EXPECT_EQ(v[2], 3.0f);
}

}  // namespace
}  // namespace di::parallel
