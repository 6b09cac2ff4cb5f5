// GET /metrics: engine and server counters in the Prometheus text exposition format (version 0.0.4).
#pragma once

#include <string>

#include "deepinfer/engine.h"
#include "server/process_memory.h"
#include "server/server_context.h"

namespace di::server {

std::string render_metrics(const EngineStats& s, const ServerCounters& c,
                           const std::vector<KernelUse>& kernels = {}, const ProcessMemory& mem = {});

}  // namespace di::server
