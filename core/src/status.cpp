// SPDX-License-Identifier: Apache-2.0
#include "loom/status.hpp"

namespace loom {

std::string Status::to_string() const {
  std::string text = loom_status_name(code_);
  if (!message_.empty()) text += ": " + message_;
  return text;
}

std::string excerpt(const std::string& value, size_t max) {
  if (value.size() <= max) return value;
  return value.substr(0, max) + "... (" + std::to_string(value.size()) + " bytes)";
}

void check(const Status& status, const std::string& context) {
  if (!status.is_ok()) throw Error::runtime(context + ": " + status.to_string());
}

}  // namespace loom
