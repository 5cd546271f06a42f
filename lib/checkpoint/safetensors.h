// The safetensors file format (https://huggingface.co/docs/safetensors, "Format"): an 8-byte
// little-endian unsigned header length N, N bytes of UTF-8 JSON, then the raw little-endian
// tensor data. The JSON maps each tensor name to {"dtype", "shape", "data_offsets": [begin,
// end]} (byte offsets relative to the start of the data, end exclusive) and may hold a
// "__metadata__" object of string -> string. The data must be fully covered by the tensors, in
// any order, without overlaps or gaps.
//
// Reading maps the file (mmap, MAP_PRIVATE): tensor() returns a zero-copy view whose deleter
// keeps the mapping alive, so the tensor stays valid after the SafetensorsFile is destroyed and
// even after the file is unlinked. The mapping is private and writable: writing to such a tensor
// copies the touched pages (copy-on-write) and never changes the file. Data whose offset is not
// aligned to its element size is copied instead (torch kernels assume aligned data).
// A header that lies (length beyond the file, bad JSON, unknown dtype, byte size that does not
// match dtype x shape, offsets out of range, overlapping tensors, gaps, a name given twice) is
// an omnibal::Error naming the file and the tensor. Writing pads the header with spaces to a multiple of 8 bytes,
// as the reference implementation does.
// Not here: big-endian hosts (refused at compile time), F8/complex dtypes, lazy remote reads.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace omnibal::checkpoint {

/// One entry of a safetensors header.
struct SafetensorsEntry {
  std::string name;
  at::ScalarType dtype = at::kFloat;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  ///< bytes from the start of the data section
  uint64_t end = 0;    ///< exclusive
};

/// The safetensors name of a dtype ("BF16", "F16", "F32", "F64", "I64", "I32", "I16", "I8",
/// "U8", "BOOL"). Throws omnibal::Error for other dtypes.
std::string safetensors_dtype_name(at::ScalarType dtype);

/// A read-only, memory-mapped safetensors file. Cheap to open: only the header is parsed and
/// validated; tensor data is paged in on access.
class SafetensorsFile {
 public:
  /// Maps `path` and validates its header. Throws omnibal::Error naming the file (and the
  /// tensor, for per-tensor problems) on any inconsistency or I/O error.
  explicit SafetensorsFile(const std::string& path);

  const std::string& path() const { return path_; }
  /// Tensor names in file order (ascending data offset).
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const { return index_.count(name) > 0; }
  /// Header entry of `name`; throws omnibal::Error naming the file when absent.
  const SafetensorsEntry& entry(const std::string& name) const;
  /// The tensor `name` on the CPU: a zero-copy view of the mapping (see the header comment).
  torch::Tensor tensor(const std::string& name) const;
  /// The "__metadata__" object (empty when absent).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  /// Bytes of the whole file.
  uint64_t file_bytes() const { return file_bytes_; }

 private:
  struct Mapping;
  std::string path_;
  uint64_t file_bytes_ = 0;
  uint64_t data_start_ = 0;  ///< 8 + header length
  std::shared_ptr<Mapping> mapping_;
  std::vector<SafetensorsEntry> entries_;  ///< ascending begin
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

/// Parses and validates a header (the JSON text) against a data section of `data_bytes` bytes.
/// Returns the entries in ascending offset order and fills `metadata`. `origin` names the file
/// in errors. Exposed for tests of malformed headers without writing files.
std::vector<SafetensorsEntry> parse_safetensors_header(
    const std::string& json_text, uint64_t data_bytes, const std::string& origin,
    std::map<std::string, std::string>* metadata);

/// Writes `tensors` (any device, any strides; written in name order) to `path`, replacing it.
/// With `durable`, the file is fsync'ed before returning. Throws omnibal::Error naming the file
/// and tensor on an unsupported dtype or an I/O error (the partial file is removed).
void write_safetensors(const std::string& path, const std::map<std::string, torch::Tensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {},
                       bool durable = true);

}  // namespace omnibal::checkpoint
