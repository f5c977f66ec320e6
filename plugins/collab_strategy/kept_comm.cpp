// SPDX-License-Identifier: Apache-2.0
#include "kept_comm.h"

namespace loom_collab {

void KeptComm::keep(std::unique_ptr<GroupComm> comm) {
  if (!comm || !comm->is_open()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    comm_.swap(comm);
  }
  comm.reset();  // the one kept before, closed outside the lock: destroying a communicator may wait on the plugin
}

void KeptComm::named(uint64_t *round, uint32_t *size) const {
  std::lock_guard<std::mutex> lock(mutex_);
  *round = comm_ ? comm_->group_hash() : 0;
  *size = comm_ ? uint32_t(comm_->size()) : 0;
}

std::unique_ptr<GroupComm> KeptComm::take(const GroupRecord &group, uint64_t me, std::string *why) {
  std::unique_ptr<GroupComm> comm;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!comm_ || comm_->group_hash() != group.reuse) {
      *why = "the group asks for the communicator of round " + hex64(group.reuse) + ", which this peer did not keep";
      return nullptr;
    }
    comm = std::move(comm_);
  }
  if (comm->adopt(group, me, why) != LOOM_OK) return nullptr;
  ++taken_;
  return comm;
}

void KeptComm::clear() {
  std::unique_ptr<GroupComm> old;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    old = std::move(comm_);
  }
}

}  // namespace loom_collab
