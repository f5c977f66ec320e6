// SPDX-License-Identifier: Apache-2.0
// A collective plugin's communicator over the job's processes (loom launch,
// torchrun's environment or mpirun), for Python: in-place allreduce and
// broadcast of contiguous CPU tensors, and a barrier. Every call waits at
// most the communicator's timeout.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace loom {
class Host;
class Collective;
class Communicator;
}  // namespace loom

namespace loom::python {

class PyCommunicator {
 public:
  PyCommunicator(const std::string& name, const std::map<std::string, std::string>& options,
                 const std::vector<std::string>& plugin_path, double timeout_s);
  ~PyCommunicator();

  int rank() const;
  int size() const;
  // op: "sum", "prod", "min", "max" or "avg".
  void allreduce(torch::Tensor tensor, const std::string& op);
  void broadcast(torch::Tensor tensor, int root);
  void barrier();

 private:
  std::unique_ptr<Host> host_;
  std::shared_ptr<Collective> collective_;
  std::unique_ptr<Communicator> comm_;
};

}  // namespace loom::python
