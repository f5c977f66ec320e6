// SPDX-License-Identifier: Apache-2.0
// Reading torch.save'd dicts of tensors, and the two data sets made of them:
// one file in memory, or a folder of shards streamed two at a time.
#include "tensor_data.hpp"

#include <caffe2/serialize/inline_container.h>
#include <malloc.h>
#include <torch/csrc/jit/serialization/unpickler.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <list>
#include <numeric>

#include "builtin.hpp"
#include "memory_estimate.hpp"

namespace loom::train::tasks {
namespace {

namespace fs = std::filesystem;

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

// The first bytes say which kind of file this is before any parser sees it.
std::string file_magic(const std::string& path, size_t n) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes(n, '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(n));
  bytes.resize(static_cast<size_t>(in.gcount()));
  return bytes;
}

// Python pickles a dict of one entry with SETITEM, which LibTorch 1.13's
// unpickler does not know; SETITEMS after a MARK means the same. Rewrites a
// top-level one-entry dict (PROTO 2, EMPTY_DICT, BINPUT 0, key, value,
// SETITEM, STOP) into that form; anything else is left as it is.
std::string batch_single_setitem(std::string pickle) {
  const std::string head("\x80\x02}q\x00", 5);
  if (pickle.size() > head.size() + 2 && pickle.compare(0, head.size(), head) == 0 && pickle[head.size()] != '(' &&
      pickle.compare(pickle.size() - 2, 2, "s.") == 0) {
    pickle[pickle.size() - 2] = 'u';
    pickle.insert(head.size(), 1, '(');
  }
  return pickle;
}

// What torch.load does for the zip format: data.pkl, whose tensors' storages
// are the records data/<key>, read one at a time (no second copy of the file).
c10::IValue unpickle_torch_save(caffe2::serialize::PyTorchStreamReader& archive) {
  at::DataPtr record;
  size_t size = 0;
  std::tie(record, size) = archive.getRecord("data.pkl");
  const std::string pickle = batch_single_setitem(std::string(static_cast<const char*>(record.get()), size));
  size_t at = 0;
  auto read = [&](char* buffer, size_t len) -> size_t {
    len = std::min(len, pickle.size() - at);
    std::memcpy(buffer, pickle.data() + at, len);
    at += len;
    return len;
  };
  auto read_record = [&](const std::string& name) { return std::get<0>(archive.getRecord("data/" + name)); };
  torch::jit::Unpickler unpickler(read, nullptr, nullptr, read_record, c10::nullopt);
  unpickler.set_version(archive.version());
  return unpickler.parse_ivalue();
}

const char* kSaveHint = "write it in Python with torch.save({\"x\": tensor, \"y\": tensor}, path)";

// Fields of one file, checked against the wanted names; returns the samples.
int64_t check_file_fields(const TensorDict& dict, const std::vector<std::string>& fields, const std::string& file,
                          const std::string& role) {
  std::vector<std::string> present;
  for (const auto& [name, t] : dict) present.push_back(name);
  int64_t samples = -1;
  std::string first;
  for (const auto& name : fields) {
    auto it = dict.find(name);
    if (it == dict.end()) {
      throw Error::usage(role + ": '" + file + "' has no field '" + name + "'; its fields are: " +
                         (present.empty() ? "none" : join(present)));
    }
    const torch::Tensor& t = it->second;
    if (t.dim() == 0) {
      throw Error::usage(role + ": field '" + name + "' of '" + file +
                         "' is a scalar; every field needs a first dimension of samples");
    }
    if (samples < 0) {
      samples = t.size(0);
      first = name;
    } else if (t.size(0) != samples) {
      throw Error::usage(role + ": the fields of '" + file + "' differ in their first dimension (samples): '" +
                         first + "' has " + std::to_string(samples) + ", '" + name + "' has " +
                         std::to_string(t.size(0)) + "; every field needs one row per sample");
    }
  }
  return samples;
}

std::map<std::string, FieldSpec> specs_of(const TensorDict& dict, const std::vector<std::string>& fields) {
  std::map<std::string, FieldSpec> specs;
  for (const auto& name : fields) {
    const torch::Tensor& t = dict.at(name);
    specs[name] = {t.scalar_type(), t.sizes().slice(1).vec()};
  }
  return specs;
}

// What both data sets share: the fields, their specs, and the gather.
class TensorFileDataset : public Dataset {
 public:
  TensorFileDataset(std::vector<std::string> fields, std::string role) : fields_(std::move(fields)), role_(std::move(role)) {}
  const std::map<std::string, FieldSpec>& specs() const { return specs_; }

 protected:
  std::vector<std::string> fields_;
  std::map<std::string, FieldSpec> specs_;
  std::string role_;
};

class InMemoryDataset : public TensorFileDataset {
 public:
  InMemoryDataset(const std::string& path, const std::vector<std::string>& fields, const std::string& role)
      : TensorFileDataset(fields, role) {
    // A file larger than the machine's memory is refused before it is read.
    std::error_code ec;
    const auto bytes = fs::file_size(path, ec);
    const uint64_t machine = machine_memory_bytes();
    if (!ec && machine > 0 && bytes > machine) {
      throw Error::usage(role + ": '" + path + "' is " + std::to_string(bytes >> 20) + " MiB, more than this machine's " +
                         std::to_string(machine >> 20) + " MiB of memory; split it into shard files in a folder " +
                         "and name the folder (shards are streamed, two at a time)");
    }
    TensorDict dict = read_tensor_dict(path, role);
    size_ = check_file_fields(dict, fields, path, role);
    specs_ = specs_of(dict, fields);
    for (const auto& name : fields) data_[name] = dict.at(name).contiguous();
  }
  int64_t size() const override { return size_; }
  Batch get(const std::vector<int64_t>& indices) const override {
    auto idx = index_tensor(indices, size_, role_.c_str());
    Batch batch;
    for (const auto& [name, t] : data_) batch.fields[name] = t.index_select(0, idx);
    batch.size = static_cast<int64_t>(indices.size());
    return batch;
  }

 private:
  int64_t size_ = 0;
  TensorDict data_;
};

// Shards are read whole when a batch first needs them; the two most recently
// used stay. The sampler (Dataset::blocks) keeps a batch within at most two
// adjacent shards, so peak memory is about two shards.
class ShardedDataset : public TensorFileDataset {
 public:
  ShardedDataset(const std::string& folder, const std::vector<std::string>& fields, const std::string& role)
      : TensorFileDataset(fields, role) {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(folder, ec)) {
      if (entry.is_regular_file() && entry.path().extension() == ".pt") files_.push_back(entry.path().string());
    }
    if (ec) throw Error::usage(role + ": cannot list the folder '" + folder + "': " + ec.message());
    std::sort(files_.begin(), files_.end());
    if (files_.empty()) {
      throw Error::usage(role + ": the folder '" + folder + "' holds no shard files (*.pt); each shard is a file " +
                         "written by torch.save({\"x\": tensor, ...}, \"shard-000.pt\")");
    }
    // One pass over the shards checks them all up front and counts their
    // samples; only one is held at a time.
    for (const auto& file : files_) {
      TensorDict dict = read_tensor_dict(file, role);
      const int64_t n = check_file_fields(dict, fields, file, role);
      auto specs = specs_of(dict, fields);
      if (specs_.empty()) {
        specs_ = specs;
      } else {
        for (const auto& name : fields) {
          const FieldSpec &want = specs_.at(name), &got = specs.at(name);
          if (want.dtype != got.dtype || want.sample_shape != got.sample_shape) {
            throw Error::usage(role + ": field '" + name + "' of shard '" + file + "' is " +
                               c10::toString(got.dtype) + " " + shape_text(got.sample_shape) + " per sample, but " +
                               c10::toString(want.dtype) + " " + shape_text(want.sample_shape) + " in '" +
                               files_.front() + "'; every shard needs the same dtypes and shapes");
          }
        }
      }
      sizes_.push_back(n);
    }
    offsets_.resize(sizes_.size() + 1, 0);
    std::partial_sum(sizes_.begin(), sizes_.end(), offsets_.begin() + 1);
  }

  int64_t size() const override { return offsets_.back(); }
  std::vector<int64_t> blocks() const override { return sizes_; }
  bool in_memory() const override { return false; }

  Batch get(const std::vector<int64_t>& indices) const override {
    index_tensor(indices, size(), role_.c_str());  // range check only
    // Rows grouped by shard, in first-seen order; then put back in order.
    std::vector<size_t> shard_of(indices.size());
    std::map<size_t, std::vector<int64_t>> rows;  // shard -> local rows
    std::vector<size_t> order;                    // shards in first-seen order
    for (size_t i = 0; i < indices.size(); ++i) {
      const auto at = std::upper_bound(offsets_.begin(), offsets_.end(), indices[i]) - offsets_.begin() - 1;
      shard_of[i] = static_cast<size_t>(at);
      if (rows.find(shard_of[i]) == rows.end()) order.push_back(shard_of[i]);
      rows[shard_of[i]].push_back(indices[i] - offsets_[at]);
    }
    std::map<std::string, std::vector<torch::Tensor>> parts;
    for (size_t shard : order) {
      const TensorDict& dict = load(shard);
      auto idx = torch::tensor(rows[shard], torch::kLong);
      for (const auto& name : fields_) parts[name].push_back(dict.at(name).index_select(0, idx));
    }
    Batch batch;
    batch.size = static_cast<int64_t>(indices.size());
    if (order.size() == 1) {
      for (auto& [name, list] : parts) batch.fields[name] = list.front();
      return batch;
    }
    // Rows came out grouped by shard: a permutation restores the asked order.
    std::vector<int64_t> position(indices.size());
    std::map<size_t, int64_t> next;
    int64_t base = 0;
    for (size_t shard : order) {
      next[shard] = base;
      base += static_cast<int64_t>(rows[shard].size());
    }
    for (size_t i = 0; i < indices.size(); ++i) position[i] = next[shard_of[i]]++;
    auto restore = torch::tensor(position, torch::kLong);
    for (auto& [name, list] : parts) batch.fields[name] = torch::cat(list).index_select(0, restore);
    return batch;
  }

 private:
  const TensorDict& load(size_t shard) const {
    for (auto it = cache_.begin(); it != cache_.end(); ++it) {
      if (it->first == shard) {
        cache_.splice(cache_.begin(), cache_, it);
        return cache_.front().second;
      }
    }
    if (cache_.size() >= 2) {
      cache_.pop_back();  // before reading: never three in memory
      // loom train keeps freed memory mapped for the next step's activations;
      // a dropped shard's pages go back now, so memory stays at two shards.
      malloc_trim(0);
    }
    TensorDict dict = read_tensor_dict(files_[shard], role_);
    if (check_file_fields(dict, fields_, files_[shard], role_) != sizes_[shard]) {
      throw Error::runtime(role_ + ": shard '" + files_[shard] + "' changed while training");
    }
    TensorDict kept;
    for (const auto& name : fields_) kept[name] = dict.at(name).contiguous();
    cache_.emplace_front(shard, std::move(kept));
    return cache_.front().second;
  }

  std::vector<std::string> files_;
  std::vector<int64_t> sizes_, offsets_;
  mutable std::list<std::pair<size_t, TensorDict>> cache_;
};

}  // namespace

TensorDict read_tensor_dict(const std::string& path, const std::string& role) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw Error::usage(role + ": there is no file '" + path + "'; " + kSaveHint);
  if (!fs::is_regular_file(path, ec)) throw Error::usage(role + ": '" + path + "' is not a file; " + kSaveHint);
  const std::string magic = file_magic(path, 4);
  if (magic != std::string("PK\x03\x04", 4)) {
    if (!magic.empty() && static_cast<unsigned char>(magic[0]) == 0x80) {
      throw Error::usage(role + ": '" + path + "' is in torch.save's legacy format; save it again with " +
                         "PyTorch >= 1.6 and the default zip format: torch.save(data, path)");
    }
    throw Error::usage(role + ": '" + path + "' is not a file written by torch.save; " + kSaveHint);
  }
  c10::IValue value;
  try {
    caffe2::serialize::PyTorchStreamReader reader(path);
    if (reader.hasRecord("constants.pkl")) {
      throw Error::usage(role + ": '" + path + "' is a TorchScript module, not data; " + kSaveHint);
    }
    value = unpickle_torch_save(reader);
  } catch (const Error&) {
    throw;
  } catch (const c10::Error& e) {
    throw Error::usage(role + ": '" + path + "' could not be read as torch.save data (" +
                       excerpt(e.what_without_backtrace(), 300) + "); " + kSaveHint);
  } catch (const std::exception& e) {
    throw Error::usage(role + ": '" + path + "' could not be read as torch.save data (" +
                       excerpt(e.what(), 300) + "); " + kSaveHint);
  }
  if (!value.isGenericDict()) {
    throw Error::usage(role + ": '" + path + "' holds a " + value.tagKind() + ", not a dict of tensors; " + kSaveHint);
  }
  TensorDict dict;
  for (const auto& item : value.toGenericDict()) {
    if (!item.key().isString()) {
      throw Error::usage(role + ": '" + path + "' has a key that is not a string; " + kSaveHint);
    }
    const std::string name = item.key().toStringRef();
    if (!item.value().isTensor()) {
      throw Error::usage(role + ": field '" + excerpt(name) + "' of '" + path + "' is a " + item.value().tagKind() +
                         ", not a tensor; " + kSaveHint);
    }
    torch::Tensor t = item.value().toTensor();
    if (t.is_sparse() || !t.device().is_cpu()) {
      throw Error::usage(role + ": field '" + excerpt(name) + "' of '" + path +
                         "' is not a dense CPU tensor; save it with .cpu() (and .to_dense())");
    }
    dict[name] = t;
  }
  return dict;
}

std::unique_ptr<Dataset> open_tensor_dataset(const std::string& path, const std::vector<std::string>& fields,
                                             const std::string& role) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return std::make_unique<ShardedDataset>(path, fields, role);
  return std::make_unique<InMemoryDataset>(path, fields, role);
}

const std::map<std::string, FieldSpec>& field_specs(const Dataset& data) {
  return dynamic_cast<const TensorFileDataset&>(data).specs();
}

}  // namespace loom::train::tasks
