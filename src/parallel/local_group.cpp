// make_local_group: ranks in threads of one process. A collective is two rendezvous: every rank publishes
// its buffer and waits for the others; each reads the peers' buffers (never writing shared ones); a second
// rendezvous keeps any rank from writing its own buffer (in-place results) before every peer has read it.
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>

#include "core/check.h"
#include "parallel/communicator.h"

namespace di::parallel {
namespace {

struct Shared {
    Shared(int n, std::chrono::milliseconds t, MemoryCopy c)
        : size(n), timeout(t), copy(std::move(c)), slots(size_t(n), nullptr), counts(size_t(n), nullptr) {}
    const int size;
    const std::chrono::milliseconds timeout;
    const MemoryCopy copy;  // empty: host memory (memcpy)
    std::mutex m;
    std::condition_variable cv;
    uint64_t generation = 0;  // completed rendezvous
    int arrived = 0;
    std::vector<const void*> slots;      // each rank's published buffer for the current collective
    std::vector<const int64_t*> counts;  // and its counts (exchange_counts, all_to_all)
    std::string failure;                 // set once: every later rendezvous returns it
};

class LocalComm final : public Communicator {
  public:
    LocalComm(std::shared_ptr<Shared> s, int rank) : s_(std::move(s)), rank_(rank) {}
    int rank() const override { return rank_; }
    int size() const override { return s_->size; }
    bool device_memory() const override { return bool(s_->copy); }

    Status barrier() override { return rendezvous("barrier"); }

    Status all_reduce_sum(const TensorView& buf) override {
        DI_CHECK(buf.dtype == DType::kF32 && buf.is_contiguous(), "all_reduce_sum of {}", buf.describe());
        const int64_t n = buf.numel();
        {
            std::lock_guard lk(s_->m);
            s_->slots[size_t(rank_)] = buf.data;
        }
        DI_TRY_STATUS(rendezvous("all_reduce_sum"));
        sum_.resize(static_cast<size_t>(n));  // kept between calls: a step's sums reuse it
        peer_.resize(static_cast<size_t>(n));
        for (int r = 0; r < s_->size; ++r) {  // rank order: the same bits on every rank
            const float* p = static_cast<const float*>(s_->slots[size_t(r)]);
            if (s_->copy) {  // device memory: through the host
                s_->copy(peer_.data(), p, size_t(n) * sizeof(float));
                p = peer_.data();
            }
            if (r == 0)
                std::memcpy(sum_.data(), p, size_t(n) * sizeof(float));
            else
                for (int64_t i = 0; i < n; ++i) sum_[size_t(i)] += p[i];
        }
        DI_TRY_STATUS(rendezvous("all_reduce_sum"));  // every peer has read this rank's buffer
        copy(buf.data, sum_.data(), size_t(n) * sizeof(float));
        return ok_status();
    }

    Status all_gather(const TensorView& src, const TensorView& dst) override {
        DI_CHECK(
            src.is_contiguous() && dst.is_contiguous() && dst.nbytes() == src.nbytes() * size_t(s_->size),
            "all_gather {} -> {}", src.describe(), dst.describe());
        {
            std::lock_guard lk(s_->m);
            s_->slots[size_t(rank_)] = src.data;
        }
        DI_TRY_STATUS(rendezvous("all_gather"));
        for (int r = 0; r < s_->size; ++r)
            copy(static_cast<char*>(dst.data) + size_t(r) * src.nbytes(), s_->slots[size_t(r)], src.nbytes());
        return rendezvous("all_gather");  // src may be reused once every peer has copied it
    }

    Result<std::vector<int64_t>> exchange_counts(std::span<const int64_t> to) override {
        DI_CHECK(int(to.size()) == s_->size, "exchange_counts of {} counts in a group of {}", to.size(),
                 s_->size);
        publish(nullptr, to.data());
        DI_TRY_STATUS(rendezvous("exchange_counts"));
        std::vector<int64_t> from(to.size());
        for (int r = 0; r < s_->size; ++r) from[size_t(r)] = s_->counts[size_t(r)][rank_];
        DI_TRY_STATUS(rendezvous("exchange_counts"));
        return from;
    }

    Status all_to_all(const TensorView& send, std::span<const int64_t> send_bytes, const TensorView& recv,
                      std::span<const int64_t> recv_bytes) override {
        check_all_to_all(send, send_bytes, recv, recv_bytes);
        publish(send.data, send_bytes.data());
        DI_TRY_STATUS(rendezvous("all_to_all"));
        char* out = static_cast<char*>(recv.data);
        for (int r = 0; r < s_->size; ++r) {
            const int64_t* theirs = s_->counts[size_t(r)];
            int64_t offset = 0;  // where rank r's bytes for this rank start in its send buffer
            for (int q = 0; q < rank_; ++q) offset += theirs[q];
            DI_CHECK(theirs[rank_] == recv_bytes[size_t(r)],
                     "all_to_all: rank {} sends {} bytes to rank {}, which expects {}", r, theirs[rank_],
                     rank_, recv_bytes[size_t(r)]);
            if (theirs[rank_] > 0)
                copy(out, static_cast<const char*>(s_->slots[size_t(r)]) + offset, size_t(theirs[rank_]));
            out += recv_bytes[size_t(r)];
        }
        return rendezvous("all_to_all");  // send may be reused once every peer has copied from it
    }

    void fail(std::string_view why) override {
        std::lock_guard lk(s_->m);
        if (s_->failure.empty()) s_->failure = fmt::format("rank {} failed: {}", rank_, why);
        s_->cv.notify_all();
    }

  private:
    void copy(void* dst, const void* src, size_t bytes) const {
        if (s_->copy)
            s_->copy(dst, src, bytes);
        else
            std::memcpy(dst, src, bytes);
    }

    void publish(const void* buf, const int64_t* counts) {
        std::lock_guard lk(s_->m);
        s_->slots[size_t(rank_)] = buf;
        s_->counts[size_t(rank_)] = counts;
    }

    Status rendezvous(const char* what) {
        std::unique_lock lk(s_->m);
        if (!s_->failure.empty()) return make_error(ErrorCode::kIo, "{}: {}", what, s_->failure);
        const uint64_t gen = s_->generation;
        if (++s_->arrived == s_->size) {
            s_->arrived = 0;
            ++s_->generation;
            s_->cv.notify_all();
            return ok_status();
        }
        const bool done =
            s_->cv.wait_for(lk, s_->timeout, [&] { return s_->generation != gen || !s_->failure.empty(); });
        if (s_->generation != gen) return ok_status();
        if (!done && s_->failure.empty())
            s_->failure = fmt::format("rank {} waited {} ms for {} of {} ranks", rank_, s_->timeout.count(),
                                      s_->size - s_->arrived, s_->size);
        s_->cv.notify_all();
        return make_error(ErrorCode::kIo, "{}: {}", what, s_->failure);
    }

    std::shared_ptr<Shared> s_;
    int rank_;
    std::vector<float> sum_, peer_;
};

}  // namespace

void check_all_to_all(const TensorView& send, std::span<const int64_t> send_bytes, const TensorView& recv,
                      std::span<const int64_t> recv_bytes) {
    int64_t out = 0, in = 0;
    for (const int64_t b : send_bytes) {
        DI_CHECK(b >= 0, "all_to_all: {} bytes to send", b);
        out += b;
    }
    for (const int64_t b : recv_bytes) {
        DI_CHECK(b >= 0, "all_to_all: {} bytes to receive", b);
        in += b;
    }
    DI_CHECK(send_bytes.size() == recv_bytes.size(), "all_to_all: {} send counts, {} receive counts",
             send_bytes.size(), recv_bytes.size());
    DI_CHECK((out == 0 || (send.is_contiguous() && int64_t(send.nbytes()) >= out)) &&
                 (in == 0 || (recv.is_contiguous() && int64_t(recv.nbytes()) >= in)),
             "all_to_all of {} bytes from {} into {} bytes of {}", out, send.describe(), in, recv.describe());
}

std::vector<std::unique_ptr<Communicator>> make_local_group(int size, std::chrono::milliseconds timeout,
                                                            MemoryCopy device_copy) {
    DI_CHECK(size >= 1, "a group of {} ranks", size);
    auto shared = std::make_shared<Shared>(size, timeout, std::move(device_copy));
    std::vector<std::unique_ptr<Communicator>> v;
    for (int r = 0; r < size; ++r) v.push_back(std::make_unique<LocalComm>(shared, r));
    return v;
}

}  // namespace di::parallel
