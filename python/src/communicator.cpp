// SPDX-License-Identifier: Apache-2.0
#include "communicator.hpp"

#include <cmath>

#include "loom/collective.hpp"
#include "loom/host.hpp"
#include "loom/job.hpp"
#include "loom/plugin_path.hpp"
#include "loom/status.hpp"

namespace loom::python {
namespace {

loom_dtype dtype_of(const torch::Tensor& t) {
  switch (t.scalar_type()) {
    case torch::kFloat: return LOOM_DTYPE_F32;
    case torch::kDouble: return LOOM_DTYPE_F64;
    case torch::kHalf: return LOOM_DTYPE_F16;
    case torch::kBFloat16: return LOOM_DTYPE_BF16;
    case torch::kInt: return LOOM_DTYPE_I32;
    case torch::kLong: return LOOM_DTYPE_I64;
    case torch::kChar: return LOOM_DTYPE_I8;
    case torch::kByte: return LOOM_DTYPE_U8;
    default:
      throw Error::usage("tensors of dtype " + std::string(c10::toString(t.scalar_type())) +
                         " cannot be reduced; valid: float32, float64, float16, bfloat16, int32, int64, int8, uint8");
  }
}

void check_tensor(const torch::Tensor& t) {
  if (!t.defined()) throw Error::usage("the tensor is undefined");
  if (!t.device().is_cpu()) throw Error::usage("the tensor is on " + t.device().str() + "; valid device: cpu");
  if (!t.is_contiguous()) throw Error::usage("the tensor is not contiguous; call .contiguous() first");
  (void)dtype_of(t);
}

loom_reduce_op op_of(const std::string& op) {
  if (op == "sum") return LOOM_REDUCE_SUM;
  if (op == "prod") return LOOM_REDUCE_PROD;
  if (op == "min") return LOOM_REDUCE_MIN;
  if (op == "max") return LOOM_REDUCE_MAX;
  if (op == "avg") return LOOM_REDUCE_AVG;
  throw Error::usage("op = '" + op + "' is not a reduction; valid: sum, prod, min, max, avg");
}

void check_status(const Status& s, const std::string& what) {
  if (s.is_ok()) return;
  if (s.code() == LOOM_ERR_INVALID_ARGUMENT || s.code() == LOOM_ERR_UNSUPPORTED) throw Error::usage(what + ": " + s.to_string());
  throw Error::runtime(what + ": " + s.to_string());
}

}  // namespace

PyCommunicator::PyCommunicator(const std::string& name, const std::map<std::string, std::string>& options,
                               const std::vector<std::string>& plugin_path, double timeout_s) {
  if (!(timeout_s > 0) || !std::isfinite(timeout_s))
    throw Error::usage("timeout = " + std::to_string(timeout_s) + " s: it must be a positive number of seconds");
  HostConfig config;
  config.search_path = plugin_search_path(plugin_path, {});
  config.options[{LOOM_KIND_COLLECTIVE, name}] = options;
  config.store_timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  host_ = std::make_unique<Host>(config, JobInfo::from_environment());
  collective_ = host_->open_collective(name);
  CommOptions comm;
  comm.rank = host_->job().rank;
  comm.size = host_->job().world_size;
  comm.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  check_status(collective_->create_comm(comm, &comm_), "collective '" + name + "' could not create the communicator");
}

PyCommunicator::~PyCommunicator() {
  comm_.reset();  // before the plugin goes
  collective_.reset();
}

int PyCommunicator::rank() const { return comm_->rank(); }
int PyCommunicator::size() const { return comm_->size(); }

void PyCommunicator::allreduce(torch::Tensor t, const std::string& op) {
  check_tensor(t);
  const loom_reduce_op reduce = op_of(op);
  check_status(comm_->allreduce(t.data_ptr(), t.data_ptr(), static_cast<uint64_t>(t.numel()), dtype_of(t), reduce),
               "allreduce");
}

void PyCommunicator::broadcast(torch::Tensor t, int root) {
  check_tensor(t);
  if (root < 0 || root >= comm_->size())
    throw Error::usage("root = " + std::to_string(root) + ": valid ranks are 0 to " + std::to_string(comm_->size() - 1));
  check_status(comm_->broadcast(t.data_ptr(), t.data_ptr(), static_cast<uint64_t>(t.numel()), dtype_of(t), root),
               "broadcast");
}

void PyCommunicator::barrier() { check_status(comm_->barrier(), "barrier"); }

}  // namespace loom::python
