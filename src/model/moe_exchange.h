// Expert parallelism's MoE exchange (docs/parallel.md): a rank's tokens go to the ranks that hold their
// experts and the pairs' outputs come back. Each rank sends its tokens' rows (x and the k ids) to every rank
// holding any of their experts; every rank runs its experts' pairs of the tokens it received (the MoE's
// kExperts pass) and sends each pair's unweighted output back; the home rank puts them in its slots and
// combines them in slot order as the one-call op does, so a token's output is the one-rank bits wherever the
// MoE's pair arithmetic does not depend on the batch. Rows move in each rank's order (tokens ascending, then
// slots), which both ends derive from the ids; every rank calls this once per MoE layer, with n = 0 when it
// has no tokens of its own in the step.
#pragma once

#include <cstdint>

#include "model/expert_partition.h"
#include "model/workspace.h"
#include "ops/backend.h"
#include "parallel/communicator.h"

namespace di::model {

// m: the layer's MoE over this rank's n tokens (x [n, hidden], ids and weights [n, k], out [n, hidden]);
// its buffers whose sizes follow the routing come from ws. A failed collective ends the process with the
// rank's message and exit status 1 (a peer failed or timed out: this rank cannot go on either).
void exchange_routed_experts(ops::Backend& be, Workspace& ws, parallel::Communicator& comm,
                             ExpertPartition experts, ops::MoeArgs m, int64_t n, int64_t k, int64_t hidden);

}  // namespace di::model
