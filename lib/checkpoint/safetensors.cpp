#include "checkpoint/safetensors.h"

#include "checkpoint/durable_file.h"
#include "core/error.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors stores little-endian data; big-endian hosts are not supported");

namespace omnibal::checkpoint {
namespace {

// The spec caps the header at 100 MB to refuse absurd allocations from a corrupt length.
constexpr uint64_t kMaxHeaderBytes = 100u << 20;

struct DtypeName {
  at::ScalarType dtype;
  const char* name;
};
constexpr DtypeName kDtypes[] = {{at::kBFloat16, "BF16"}, {at::kHalf, "F16"}, {at::kFloat, "F32"},
                                 {at::kDouble, "F64"},    {at::kLong, "I64"}, {at::kInt, "I32"},
                                 {at::kShort, "I16"},     {at::kChar, "I8"},  {at::kByte, "U8"},
                                 {at::kBool, "BOOL"}};

at::ScalarType dtype_from_name(const std::string& name, const std::string& where) {
  for (const auto& d : kDtypes)
    if (name == d.name) return d.dtype;
  OMNIBAL_FAIL(where, ": unsupported dtype \"", name,
               "\" (expected BF16, F16, F32, F64, I64, I32, I16, I8, U8 or BOOL)");
}

uint64_t checked_numel(const std::vector<int64_t>& shape, const std::string& where) {
  uint64_t n = 1;
  for (const int64_t d : shape) {
    OMNIBAL_CHECK(d >= 0, where, ": negative dimension ", d, " in shape");
    OMNIBAL_CHECK(d == 0 || n <= (uint64_t{1} << 62) / static_cast<uint64_t>(d), where,
                  ": shape overflows 64-bit element count");
    n *= static_cast<uint64_t>(d);
  }
  return n;
}

SafetensorsEntry parse_entry(const std::string& name, const nlohmann::json& value,
                             uint64_t data_bytes, const std::string& where) {
  OMNIBAL_CHECK(value.is_object(), where, ": expected an object with dtype, shape, data_offsets");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    OMNIBAL_CHECK(value.contains(key), where, ": missing \"", key, "\"");
  OMNIBAL_CHECK(value["dtype"].is_string(), where, ": dtype must be a string");
  SafetensorsEntry e;
  e.name = name;
  e.dtype = dtype_from_name(value["dtype"].get<std::string>(), where);
  const auto& shape = value["shape"];
  OMNIBAL_CHECK(shape.is_array(), where, ": shape must be an array of integers");
  for (const auto& d : shape) {
    OMNIBAL_CHECK(d.is_number_integer(), where, ": shape must be an array of integers, got ",
                  shape.dump());
    e.shape.push_back(d.get<int64_t>());
  }
  const auto& offsets = value["data_offsets"];
  OMNIBAL_CHECK(offsets.is_array() && offsets.size() == 2 && offsets[0].is_number_unsigned() &&
                    offsets[1].is_number_unsigned(),
                where, ": data_offsets must be [begin, end] with non-negative integers, got ",
                offsets.dump());
  e.begin = offsets[0].get<uint64_t>();
  e.end = offsets[1].get<uint64_t>();
  OMNIBAL_CHECK(e.begin <= e.end, where, ": data_offsets [", e.begin, ", ", e.end,
                "] end before begin");
  OMNIBAL_CHECK(e.end <= data_bytes, where, ": data_offsets [", e.begin, ", ", e.end,
                "] out of range: the data section has ", data_bytes, " bytes");
  const uint64_t expected = checked_numel(e.shape, where) * c10::elementSize(e.dtype);
  OMNIBAL_CHECK(e.end - e.begin == expected, where, ": ", e.end - e.begin,
                " bytes in data_offsets but ", value["dtype"].get<std::string>(), " ", shape.dump(),
                " needs ", expected, " bytes");
  return e;
}

}  // namespace

std::string safetensors_dtype_name(at::ScalarType dtype) {
  for (const auto& d : kDtypes)
    if (dtype == d.dtype) return d.name;
  OMNIBAL_FAIL(
      "safetensors: unsupported dtype ", c10::toString(dtype),
      " (supported: bfloat16, float16, float32, float64, int64, int32, int16, int8, uint8, bool)");
}

std::vector<SafetensorsEntry> parse_safetensors_header(
    const std::string& json_text, uint64_t data_bytes, const std::string& origin,
    std::map<std::string, std::string>* metadata) {
  nlohmann::json header;
  // nlohmann keeps the last of duplicate keys silently; a header naming a tensor twice lies.
  std::set<std::string> keys;
  std::string duplicate;
  const auto on_event = [&](int depth, nlohmann::json::parse_event_t event,
                            nlohmann::json& parsed) {
    if (event == nlohmann::json::parse_event_t::key && depth == 1 &&
        !keys.insert(parsed.get<std::string>()).second && duplicate.empty())
      duplicate = parsed.get<std::string>();
    return true;
  };
  try {
    header = nlohmann::json::parse(json_text, on_event);
  } catch (const nlohmann::json::exception& e) {
    OMNIBAL_FAIL(origin, ": the safetensors header is not valid JSON: ", e.what());
  }
  OMNIBAL_CHECK(duplicate.empty(), origin, ": tensor \"", duplicate,
                "\" appears twice in the header");
  OMNIBAL_CHECK(header.is_object(), origin, ": the safetensors header must be a JSON object");
  std::vector<SafetensorsEntry> entries;
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      OMNIBAL_CHECK(value.is_object(), origin, ": __metadata__ must be an object of strings");
      for (const auto& [k, v] : value.items()) {
        OMNIBAL_CHECK(v.is_string(), origin, ": __metadata__[\"", k, "\"] must be a string");
        if (metadata) (*metadata)[k] = v.get<std::string>();
      }
      continue;
    }
    entries.push_back(parse_entry(name, value, data_bytes, origin + ": tensor \"" + name + "\""));
  }
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  // Tensors must tile the data section exactly: each starts where the previous ended.
  uint64_t covered = 0;
  const SafetensorsEntry* previous = nullptr;
  for (const auto& e : entries) {
    OMNIBAL_CHECK(e.begin >= covered, origin, ": tensor \"", e.name, "\" bytes [", e.begin, ", ",
                  e.end, ") overlap tensor \"", previous ? previous->name : "", "\" bytes [",
                  previous ? previous->begin : 0, ", ", covered, ")");
    OMNIBAL_CHECK(e.begin == covered, origin, ": gap of ", e.begin - covered,
                  " bytes before tensor \"", e.name, "\" (bytes [", covered, ", ", e.begin,
                  ") belong to no tensor)");
    covered = e.end;
    previous = &e;
  }
  OMNIBAL_CHECK(covered == data_bytes, origin, ": ", data_bytes - covered,
                " trailing bytes after the last tensor",
                previous ? " \"" + previous->name + "\"" : "", " (data section ", data_bytes,
                " bytes, tensors cover ", covered, ")");
  return entries;
}

// ---------------------------------------------------------------------------------------------
// Reading

struct SafetensorsFile::Mapping {
  void* base = MAP_FAILED;
  size_t bytes = 0;
  ~Mapping() {
    if (base != MAP_FAILED) ::munmap(base, bytes);
  }
};

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  OMNIBAL_CHECK(fd >= 0, "cannot open ", path, ": ", std::strerror(errno));
  struct stat st {};
  const int stat_rc = ::fstat(fd, &st);
  const int stat_err = errno;
  if (stat_rc != 0) ::close(fd);
  OMNIBAL_CHECK(stat_rc == 0, "cannot stat ", path, ": ", std::strerror(stat_err));
  file_bytes_ = static_cast<uint64_t>(st.st_size);
  mapping_ = std::make_shared<Mapping>();
  if (file_bytes_ > 0) {
    // Private and writable: tensors handed out may be written (copy-on-write, never the file).
    mapping_->base = ::mmap(nullptr, file_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    mapping_->bytes = file_bytes_;
  }
  const int map_err = errno;
  ::close(fd);
  OMNIBAL_CHECK(file_bytes_ == 0 || mapping_->base != MAP_FAILED, "cannot mmap ", path, ": ",
                std::strerror(map_err));
  OMNIBAL_CHECK(file_bytes_ >= 8, path, ": ", file_bytes_,
                " bytes is too short for a safetensors file (8-byte header length missing)");
  const auto* bytes = static_cast<const unsigned char*>(mapping_->base);
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | bytes[i];
  OMNIBAL_CHECK(header_bytes <= file_bytes_ - 8, path, ": header length ", header_bytes,
                " runs beyond the end of the file (", file_bytes_, " bytes)");
  OMNIBAL_CHECK(header_bytes <= kMaxHeaderBytes, path, ": header length ", header_bytes,
                " exceeds the 100 MB limit of the format");
  data_start_ = 8 + header_bytes;
  const std::string json_text(reinterpret_cast<const char*>(bytes + 8), header_bytes);
  entries_ = parse_safetensors_header(json_text, file_bytes_ - data_start_, path, &metadata_);
  for (size_t i = 0; i < entries_.size(); ++i) index_[entries_[i].name] = i;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& e : entries_) out.push_back(e.name);
  return out;
}

const SafetensorsEntry& SafetensorsFile::entry(const std::string& name) const {
  const auto it = index_.find(name);
  OMNIBAL_CHECK(it != index_.end(), path_, ": no tensor \"", name, "\"");
  return entries_[it->second];
}

torch::Tensor SafetensorsFile::tensor(const std::string& name) const {
  const SafetensorsEntry& e = entry(name);
  const auto options = torch::TensorOptions().dtype(e.dtype).device(torch::kCPU);
  if (e.begin == e.end) return torch::empty(e.shape, options);
  char* data = static_cast<char*>(mapping_->base) + data_start_ + e.begin;
  std::shared_ptr<Mapping> keep = mapping_;
  torch::Tensor view = torch::from_blob(
      data, e.shape, [keep](void*) mutable { keep.reset(); }, options);
  if (reinterpret_cast<uintptr_t>(data) % c10::elementSize(e.dtype) != 0) return view.clone();
  return view;
}

// ---------------------------------------------------------------------------------------------
// Writing

void write_safetensors(const std::string& path, const std::map<std::string, torch::Tensor>& tensors,
                       const std::map<std::string, std::string>& metadata, bool durable) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<torch::Tensor> data;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    OMNIBAL_CHECK(!name.empty() && name != "__metadata__", path, ": invalid tensor name \"", name,
                  "\"");
    OMNIBAL_CHECK(tensor.defined(), path, ": tensor \"", name, "\" is undefined");
    std::string dtype;
    try {
      dtype = safetensors_dtype_name(tensor.scalar_type());
    } catch (const Error& e) {
      OMNIBAL_FAIL(path, ": tensor \"", name, "\": ", e.what());
    }
    torch::Tensor cpu = tensor.detach().to(torch::kCPU).contiguous();
    const uint64_t bytes = static_cast<uint64_t>(cpu.numel()) * cpu.element_size();
    header[name] = {{"dtype", dtype},
                    {"shape", cpu.sizes().vec()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    data.push_back(std::move(cpu));
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  unsigned char length[8];
  for (int i = 0; i < 8; ++i)
    length[i] = static_cast<unsigned char>(uint64_t{text.size()} >> (8 * i));
  DurableFile file(path);
  file.write(length, sizeof length);
  file.write(text.data(), text.size());
  for (const auto& t : data)
    file.write(t.data_ptr(), static_cast<size_t>(t.numel()) * t.element_size());
  file.finish(durable);
}

}  // namespace omnibal::checkpoint
