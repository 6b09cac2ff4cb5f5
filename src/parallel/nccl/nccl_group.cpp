#include "parallel/nccl/nccl_group.h"

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>

#include <mutex>
#include <string>
#include <thread>

#include "core/check.h"

namespace di::parallel {
namespace {

struct Nccl {
    void* lib = nullptr;
    decltype(&ncclCommInitAll) init_all = nullptr;
    decltype(&ncclAllReduce) all_reduce = nullptr;
    decltype(&ncclAllGather) all_gather = nullptr;
    decltype(&ncclSend) send = nullptr;
    decltype(&ncclRecv) recv = nullptr;
    decltype(&ncclGroupStart) group_start = nullptr;
    decltype(&ncclGroupEnd) group_end = nullptr;
    decltype(&ncclCommAbort) abort = nullptr;
    decltype(&ncclCommDestroy) destroy = nullptr;
    decltype(&ncclCommGetAsyncError) async_error = nullptr;
    decltype(&ncclGetErrorString) error_string = nullptr;
    std::string why;  // empty when loaded
};

const Nccl& nccl() {
    static Nccl n = [] {
        Nccl l;
        for (const char* name : {"libnccl.so.2", "libnccl.so"})
            if ((l.lib = dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
        if (!l.lib) {
            l.why = "libnccl.so.2 not found (dlopen)";
            return l;
        }
#define DI_NCCL_SYM(v, name)                                \
    v = reinterpret_cast<decltype(v)>(dlsym(l.lib, #name)); \
    if (!v) l.why = std::string("libnccl has no ") + #name;
        DI_NCCL_SYM(l.init_all, ncclCommInitAll)
        DI_NCCL_SYM(l.all_reduce, ncclAllReduce)
        DI_NCCL_SYM(l.all_gather, ncclAllGather)
        DI_NCCL_SYM(l.send, ncclSend)
        DI_NCCL_SYM(l.recv, ncclRecv)
        DI_NCCL_SYM(l.group_start, ncclGroupStart)
        DI_NCCL_SYM(l.group_end, ncclGroupEnd)
        DI_NCCL_SYM(l.abort, ncclCommAbort)
        DI_NCCL_SYM(l.destroy, ncclCommDestroy)
        DI_NCCL_SYM(l.async_error, ncclCommGetAsyncError)
        DI_NCCL_SYM(l.error_string, ncclGetErrorString)
#undef DI_NCCL_SYM
        return l;
    }();
    return n;
}

class NcclComm final : public Communicator {
  public:
    NcclComm(ncclComm_t comm, int device, int rank, int size, std::chrono::milliseconds timeout)
        : comm_(comm), device_(device), rank_(rank), size_(size), timeout_(timeout) {
        cudaSetDevice(device_);
        cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking);
    }
    ~NcclComm() override {
        cudaSetDevice(device_);
        if (stream_) cudaStreamDestroy(stream_);
        if (barrier_buf_) cudaFree(barrier_buf_);
        if (counts_buf_) cudaFree(counts_buf_);
        if (!aborted_) nccl().destroy(comm_);  // an aborted communicator is already freed
    }
    int rank() const override { return rank_; }
    int size() const override { return size_; }
    bool device_memory() const override { return true; }

    Status all_reduce_sum(const TensorView& buf) override {
        DI_CHECK(buf.dtype == DType::kF32 && buf.is_contiguous() && buf.device != Device::kHost,
                 "nccl all_reduce_sum of {}", buf.describe());
        return run("all_reduce_sum", [&] {
            return nccl().all_reduce(buf.data, buf.data, size_t(buf.numel()), ncclFloat, ncclSum, comm_,
                                     stream_);
        });
    }
    Status all_gather(const TensorView& src, const TensorView& dst) override {
        DI_CHECK(src.is_contiguous() && dst.is_contiguous() && dst.nbytes() == src.nbytes() * size_t(size_) &&
                     src.device != Device::kHost && dst.device != Device::kHost,
                 "nccl all_gather {} -> {}", src.describe(), dst.describe());
        return run("all_gather", [&] {
            return nccl().all_gather(src.data, dst.data, src.nbytes(), ncclChar, comm_, stream_);
        });
    }
    Result<std::vector<int64_t>> exchange_counts(std::span<const int64_t> to) override {
        DI_CHECK(int(to.size()) == size_, "exchange_counts of {} counts in a group of {}", to.size(), size_);
        const size_t row = size_t(size_) * sizeof(int64_t);  // one rank's counts
        cudaSetDevice(device_);
        if (!counts_buf_ && cudaMalloc(&counts_buf_, row * size_t(size_ + 1)) != cudaSuccess)
            return make_error(ErrorCode::kIo, "exchange_counts: no device memory on rank {}", rank_);
        char* mine = static_cast<char*>(counts_buf_);  // then every rank's row, gathered
        if (cudaMemcpy(mine, to.data(), row, cudaMemcpyHostToDevice) != cudaSuccess)
            return make_error(ErrorCode::kIo, "exchange_counts: CUDA error on rank {}", rank_);
        DI_TRY_STATUS(run("exchange_counts", [&] {
            return nccl().all_gather(mine, mine + row, row, ncclChar, comm_, stream_);
        }));
        std::vector<int64_t> all(size_t(size_) * size_t(size_)), from(static_cast<size_t>(size_));
        if (cudaMemcpy(all.data(), mine + row, row * size_t(size_), cudaMemcpyDeviceToHost) != cudaSuccess)
            return make_error(ErrorCode::kIo, "exchange_counts: CUDA error on rank {}", rank_);
        for (int r = 0; r < size_; ++r) from[size_t(r)] = all[size_t(r) * size_t(size_) + size_t(rank_)];
        return from;
    }
    Status all_to_all(const TensorView& send, std::span<const int64_t> send_bytes, const TensorView& recv,
                      std::span<const int64_t> recv_bytes) override {
        check_all_to_all(send, send_bytes, recv, recv_bytes);
        DI_CHECK(int(send_bytes.size()) == size_, "all_to_all: {} counts in a group of {}", send_bytes.size(),
                 size_);
        return run("all_to_all", [&] {  // point-to-point pairs in one group: NCCL's all-to-all
            const char* out = static_cast<const char*>(send.data);
            char* in = static_cast<char*>(recv.data);
            ncclResult_t r = nccl().group_start();
            for (int p = 0; p < size_ && r == ncclSuccess; ++p) {
                if (send_bytes[size_t(p)] > 0)
                    r = nccl().send(out, size_t(send_bytes[size_t(p)]), ncclChar, p, comm_, stream_);
                if (r == ncclSuccess && recv_bytes[size_t(p)] > 0)
                    r = nccl().recv(in, size_t(recv_bytes[size_t(p)]), ncclChar, p, comm_, stream_);
                out += send_bytes[size_t(p)];
                in += recv_bytes[size_t(p)];
            }
            const ncclResult_t end = nccl().group_end();  // a started group is always ended
            return r != ncclSuccess ? r : end;
        });
    }
    Status barrier() override {
        if (!barrier_buf_) {
            cudaSetDevice(device_);
            if (cudaMalloc(&barrier_buf_, sizeof(float)) != cudaSuccess)
                return make_error(ErrorCode::kIo, "barrier: no device memory on rank {}", rank_);
        }
        return run("barrier", [&] {
            return nccl().all_reduce(barrier_buf_, barrier_buf_, 1, ncclFloat, ncclSum, comm_, stream_);
        });
    }
    void fail(std::string_view why) override {
        std::lock_guard lk(m_);
        if (!aborted_) {
            failure_ = fmt::format("rank {} failed: {}", rank_, why);
            aborted_ = true;
            nccl().abort(comm_);  // peers' collectives then report an error instead of waiting forever
        }
    }

  private:
    // Enqueues after the device's work so far (a device-wide sync: the backends' own streams), then
    // waits for the collective, polling NCCL's asynchronous error and the clock.
    template <class Enqueue>
    Status run(const char* what, Enqueue&& enqueue) {
        {
            std::lock_guard lk(m_);
            if (aborted_) return make_error(ErrorCode::kIo, "{}: {}", what, failure_);
        }
        cudaSetDevice(device_);
        if (cudaDeviceSynchronize() != cudaSuccess)
            return make_error(ErrorCode::kIo, "{}: CUDA error on rank {} before the collective", what, rank_);
        if (const ncclResult_t r = enqueue(); r != ncclSuccess)
            return make_error(ErrorCode::kIo, "{} on rank {}: {}", what, rank_, nccl().error_string(r));
        const auto deadline = std::chrono::steady_clock::now() + timeout_;
        for (;;) {
            const cudaError_t q = cudaStreamQuery(stream_);
            if (q == cudaSuccess) return ok_status();
            if (q != cudaErrorNotReady)
                return make_error(ErrorCode::kIo, "{} on rank {}: {}", what, rank_, cudaGetErrorString(q));
            ncclResult_t async = ncclSuccess;
            nccl().async_error(comm_, &async);
            if (async != ncclSuccess) return abort_with(what, nccl().error_string(async));
            if (std::chrono::steady_clock::now() > deadline)
                return abort_with(what, fmt::format("not done after {} ms", timeout_.count()).c_str());
            std::this_thread::yield();
        }
    }
    Status abort_with(const char* what, const char* why) {
        std::lock_guard lk(m_);
        if (!aborted_) {
            failure_ = fmt::format("rank {}: {}", rank_, why);
            aborted_ = true;
            nccl().abort(comm_);
        }
        return make_error(ErrorCode::kIo, "{}: {}", what, failure_);
    }

    ncclComm_t comm_;
    int device_, rank_, size_;
    std::chrono::milliseconds timeout_;
    cudaStream_t stream_ = nullptr;
    void* barrier_buf_ = nullptr;
    void* counts_buf_ = nullptr;  // exchange_counts: this rank's row, then the gathered rows
    std::mutex m_;
    bool aborted_ = false;
    std::string failure_;
};

}  // namespace

Result<std::vector<std::unique_ptr<Communicator>>> make_nccl_group(int devices,
                                                                   std::chrono::milliseconds timeout) {
    const Nccl& n = nccl();
    if (!n.why.empty()) return make_error(ErrorCode::kUnsupported, "NCCL: {}", n.why);
    int have = 0;
    if (cudaGetDeviceCount(&have) != cudaSuccess || devices < 1 || devices > have)
        return make_error(ErrorCode::kInvalidArgument, "{} GPUs asked for, {} present", devices, have);
    std::vector<ncclComm_t> comms(static_cast<size_t>(devices));
    std::vector<int> ids(static_cast<size_t>(devices));
    for (int d = 0; d < devices; ++d) ids[size_t(d)] = d;
    if (const ncclResult_t r = n.init_all(comms.data(), devices, ids.data()); r != ncclSuccess)
        return make_error(ErrorCode::kIo, "NCCL: ncclCommInitAll over {} GPUs: {}", devices,
                          n.error_string(r));
    std::vector<std::unique_ptr<Communicator>> v;
    for (int d = 0; d < devices; ++d)
        v.push_back(std::make_unique<NcclComm>(comms[size_t(d)], d, d, devices, timeout));
    return v;
}

}  // namespace di::parallel
