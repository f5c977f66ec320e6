// SPDX-License-Identifier: Apache-2.0
// tasks/tensor_data.hpp: data sets a user brings as files written by
// PyTorch's torch.save({"x": tensor, "y": tensor, ...}) (the zip format,
// PyTorch >= 1.6), either one file held in memory or a folder of shard files
// streamed with at most two shards in memory. Internal to libloom.
//
// Every tensor of a file is one field; all fields share the first dimension,
// the sample. Errors are Error::usage naming the file and what would be valid.
// Thread safety: a data set is used from one thread (its shard cache is not
// locked).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "loom/train/task.hpp"

namespace loom::train::tasks {

using TensorDict = std::map<std::string, torch::Tensor>;

// Reads a torch.save'd dict of tensors. `role` names the file in messages
// ("task.train = 'a.pt'").
TensorDict read_tensor_dict(const std::string& path, const std::string& role);

// What a data set's fields look like: dtype and the shape after the sample
// dimension, taken from its first file.
struct FieldSpec {
  torch::ScalarType dtype;
  std::vector<int64_t> sample_shape;
};

// A data set of the named fields at `path`: a file (loaded into memory) or a
// folder whose *.pt files, in name order, are its shards (streamed). Checks
// that every field is present, that each file's fields have one sample count,
// and that shards agree on dtypes and shapes.
std::unique_ptr<Dataset> open_tensor_dataset(const std::string& path, const std::vector<std::string>& fields,
                                             const std::string& role);

// The fields' specs of a data set made by open_tensor_dataset.
const std::map<std::string, FieldSpec>& field_specs(const Dataset& data);

}  // namespace loom::train::tasks
