#include "model/moe_exchange.h"

#include <cstdio>
#include <cstdlib>

namespace di::model {

using namespace di::ops;

namespace {

// A collective failed (a peer failed or timed out): this rank cannot go on either.
[[noreturn]] void end_rank(int rank, const Error& e) {
    std::fprintf(stderr, "deepinfer: rank %d: %s\n", rank, e.message.c_str());
    std::fflush(stderr);
    std::_Exit(EXIT_FAILURE);
}

// Bytes of rows[p] rows of row_bytes each, per rank.
std::vector<int64_t> row_bytes(const std::vector<int64_t>& rows, int64_t bytes_a_row) {
    std::vector<int64_t> b(rows.size());
    for (size_t p = 0; p < rows.size(); ++p) b[p] = rows[p] * bytes_a_row;
    return b;
}

}  // namespace

void exchange_routed_experts(Backend& be, Workspace& ws, parallel::Communicator& comm,
                             ExpertPartition experts, MoeArgs m, int64_t n, int64_t k, int64_t D) {
    const int ranks = comm.size(), me = comm.rank();
    const int64_t E = m.n_experts;
    const int64_t x_row = D * int64_t(sizeof(float)), id_row = k * int64_t(sizeof(int32_t));
    auto ok = [&](const Status& st) {
        if (!st.ok()) end_rank(me, st.error());
    };
    auto take = [&](DType dt, int64_t rows, int64_t cols) {  // sizes vary with the routing: ws
        return rows > 0 ? ws.take(dt, {rows, cols}) : TensorView{};
    };
    auto to_host = [&](const TensorView& v) {
        std::vector<int32_t> h(size_t(v.numel()));
        be.copy(TensorView::contiguous(h.data(), DType::kI32, {v.shape[0], v.shape[1]}), v);
        be.synchronize();
        return h;
    };
    auto gather = [&](const TensorView& table, const std::vector<int32_t>& rows, const TensorView& out) {
        be.embed({.tokens = upload_i32(ws, be, rows), .table = table, .out = out});  // rows by index
    };

    // Where this rank's pairs go: the tokens each rank receives and how many pairs it sends back.
    const std::vector<int32_t> ids = n > 0 ? to_host(m.ids) : std::vector<int32_t>{};
    std::vector<int> owner(ids.size());
    std::vector<int64_t> to(size_t(ranks), 0), pairs_back(size_t(ranks), 0);
    std::vector<std::vector<int32_t>> tokens_to(static_cast<size_t>(ranks));
    for (int64_t t = 0; t < n; ++t)
        for (int64_t j = 0; j < k; ++j) {
            const int p = experts.owner(ids[size_t(t * k + j)], E);
            owner[size_t(t * k + j)] = p;
            ++pairs_back[size_t(p)];
            if (tokens_to[size_t(p)].empty() || tokens_to[size_t(p)].back() != t)
                tokens_to[size_t(p)].push_back(int32_t(t));
        }
    // each token travels with its row group's size (MoeArgs::row_sizes) where the backend picks the experts'
    // kernels per group: a rank sees the tokens of groups interleaved
    const bool sizes = be.uses_row_groups();
    std::vector<int32_t> group_size(static_cast<size_t>(n), static_cast<int32_t>(n));
    for (int64_t t0 = 0, g = 0; g < int64_t(m.row_groups.size()); t0 += m.row_groups[size_t(g++)])
        std::fill_n(group_size.begin() + t0, m.row_groups[size_t(g)], int32_t(m.row_groups[size_t(g)]));
    std::vector<int32_t> send_rows, send_ids, send_sizes;  // in rank order
    for (int p = 0; p < ranks; ++p) {
        to[size_t(p)] = int64_t(tokens_to[size_t(p)].size());
        for (const int32_t t : tokens_to[size_t(p)]) {
            send_rows.push_back(t);
            send_ids.insert(send_ids.end(), ids.begin() + t * k, ids.begin() + (t + 1) * k);
            if (sizes) send_sizes.push_back(group_size[size_t(t)]);
        }
    }
    auto counts = comm.exchange_counts(to);
    if (!counts.ok()) end_rank(me, counts.error());
    const std::vector<int64_t> from = std::move(counts.value());
    int64_t M = 0;  // tokens this rank receives
    for (const int64_t c : from) M += c;
    const int64_t S = int64_t(send_rows.size());
    const TensorView x_send = take(DType::kF32, S, D), ids_send = take(DType::kI32, S, k),
                     sizes_send = take(DType::kI32, sizes ? S : 0, 1);
    if (S > 0) {
        gather(m.x, send_rows, x_send);
        be.copy(ids_send, TensorView::contiguous(send_ids.data(), DType::kI32, {S, k}));
        if (sizes) be.copy(sizes_send, TensorView::contiguous(send_sizes.data(), DType::kI32, {S, 1}));
    }
    const TensorView x_recv = take(DType::kF32, M, D), ids_recv = take(DType::kI32, M, k),
                     sizes_recv = take(DType::kI32, sizes ? M : 0, 1);
    be.synchronize();
    const int64_t size_row = int64_t(sizeof(int32_t));
    ok(comm.all_to_all(x_send, row_bytes(to, x_row), x_recv, row_bytes(from, x_row)));
    ok(comm.all_to_all(ids_send, row_bytes(to, id_row), ids_recv, row_bytes(from, id_row)));
    if (sizes)
        ok(comm.all_to_all(sizes_send, row_bytes(to, size_row), sizes_recv, row_bytes(from, size_row)));

    // This rank's experts on the tokens it received; their pairs' rows go back in the order they came.
    std::vector<int64_t> pairs_out(size_t(ranks), 0);
    TensorView ret;
    if (M > 0) {
        const std::vector<int32_t> rid = to_host(ids_recv);
        std::vector<int32_t> keep;  // rows of the [M * k, D] slots that hold this rank's pairs
        for (int64_t p = 0, row = 0; p < ranks; ++p)
            for (int64_t i = 0; i < from[size_t(p)]; ++i, ++row)
                for (int64_t j = 0; j < k; ++j)
                    if (experts.owns(rid[size_t(row * k + j)], E)) {
                        keep.push_back(int32_t(row * k + j));
                        ++pairs_out[size_t(p)];
                    }
        MoeArgs e = m;
        e.x = x_recv;
        e.ids = ids_recv;
        e.row_groups = {};
        if (sizes) e.row_sizes = sizes_recv.reshape({M});
        e.weights = take(DType::kF32, M, k);
        be.fill_zero(e.weights);          // the experts' pass does not weigh its pairs
        e.out = take(DType::kF32, M, D);  // not written by this pass
        e.slots = ws.take(DType::kF32, {M, k, D});
        e.pass = MoeArgs::Pass::kExperts;
        e.expert_first = experts.first(E);
        e.expert_end = experts.end(E);
        be.moe(e);
        ret = take(DType::kF32, int64_t(keep.size()), D);
        if (!keep.empty()) gather(e.slots.reshape({M * k, D}), keep, ret);
        be.synchronize();
    }
    // This rank's pairs come back grouped by the rank that ran them; the slots take them in (token, slot)
    // order.
    const TensorView back = take(DType::kF32, n * k, D);
    ok(comm.all_to_all(ret, row_bytes(pairs_out, x_row), back, row_bytes(pairs_back, x_row)));
    if (n == 0) return;

    std::vector<int64_t> next(size_t(ranks), 0);  // each rank's next returned row
    for (int p = 1; p < ranks; ++p) next[size_t(p)] = next[size_t(p - 1)] + pairs_back[size_t(p - 1)];
    std::vector<int32_t> at(size_t(n * k));
    for (size_t i = 0; i < at.size(); ++i) at[i] = int32_t(next[size_t(owner[i])]++);
    m.slots = ws.take(DType::kF32, {n, k, D});
    gather(back, at, m.slots.reshape({n * k, D}));
    m.pass = MoeArgs::Pass::kCombine;
    be.moe(m);
}

}  // namespace di::model
