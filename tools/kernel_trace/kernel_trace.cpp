// A CUDA injection library (CUDA_INJECTION64_PATH=libkernel_trace.so) that records every kernel's GPU start
// and end through CUPTI's activity API, kernels inside CUDA graphs included, and writes one CSV line per
// kernel to $DEEPINFER_TRACE_OUT at exit: start_ns,end_ns,graph_id,name. The GPU machine has no Nsight
// Systems; this gives the timeline (kernel time against the idle gaps between kernels) without it.
#include <cupti.h>
#include <cxxabi.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

namespace {

struct Row {
    uint64_t start, end;
    uint32_t graph;
    std::string name;
};

std::mutex rows_mu;
std::vector<Row> rows;

std::string demangled(const char* name) {
    int status = 0;
    char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
    std::string s = status == 0 && d != nullptr ? d : name;
    std::free(d);
    return s;
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
    *size = size_t(8) << 20;
    *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, *size));
    *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
    CUpti_Activity* rec = nullptr;
    std::lock_guard lock(rows_mu);
    while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
        if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
        rows.push_back({k->start, k->end, k->graphId, demangled(k->name)});
    }
    std::free(buffer);
}

void write_rows() {
    cuptiActivityFlushAll(1);
    const char* path = std::getenv("DEEPINFER_TRACE_OUT");
    std::FILE* f = std::fopen(path != nullptr ? path : "kernel_trace.csv", "w");
    if (f == nullptr) return;
    std::lock_guard lock(rows_mu);
    std::fprintf(f, "start_ns,end_ns,graph_id,name\n");
    for (const Row& r : rows) {
        std::string name = r.name;
        for (char& c : name)
            if (c == ',' || c == '"') c = ';';
        std::fprintf(f, "%llu,%llu,%u,%s\n", (unsigned long long)r.start, (unsigned long long)r.end, r.graph,
                     name.c_str());
    }
    std::fclose(f);
}

}  // namespace

extern "C" int InitializeInjection() {
    if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS) return 0;
    if (cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) return 0;
    std::atexit(write_rows);
    return 1;
}
