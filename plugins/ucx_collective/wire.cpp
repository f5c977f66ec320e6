// SPDX-License-Identifier: Apache-2.0
// Names for what the wire format carries.
#include "wire.h"

namespace loom_ucx {

const char *op_kind_name(uint8_t kind) {
  switch (kind) {
    case kOpAllreduce: return "allreduce";
    case kOpBroadcast: return "broadcast";
    case kOpReduce: return "reduce";
    case kOpAllgather: return "allgather";
    case kOpReduceScatter: return "reduce_scatter";
    case kOpAlltoall: return "alltoall";
    case kOpBarrier: return "barrier";
    default: return "an unknown operation";
  }
}

}  // namespace loom_ucx
