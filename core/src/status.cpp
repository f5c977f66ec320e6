#include "loom/status.hpp"

namespace loom {

std::string Status::to_string() const {
  std::string text = loom_status_name(code_);
  if (!message_.empty()) text += ": " + message_;
  return text;
}

void check(const Status& status, const std::string& context) {
  if (!status.is_ok()) throw Error::runtime(context + ": " + status.to_string());
}

}  // namespace loom
