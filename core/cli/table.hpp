// SPDX-License-Identifier: Apache-2.0
// A plain text table for the command line: columns padded to their widest cell.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace loom::cli {

class Table {
 public:
  explicit Table(std::vector<std::string> header) { rows_.push_back(std::move(header)); }
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  // Writes the rows; the last column is not padded.
  void print(std::ostream& out) const;

 private:
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace loom::cli
