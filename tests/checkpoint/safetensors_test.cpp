// safetensors read/write: round trips over dtypes and shapes, a fixture written by an
// independent Python writer (fixtures/make_safetensors_fixture.py), mmap lifetime and
// copy-on-write, and every malformed-header case naming the file and the tensor.
#include "checkpoint/safetensors.h"
#include "tests/checkpoint/test_dirs.h"
#include "core/error.h"

#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;
using omnibal::checkpoint::SafetensorsFile;
using omnibal::checkpoint::write_safetensors;
using omnibal::checkpoint::testing::ScratchDir;

namespace {

void write_raw(const std::string& path, uint64_t declared_length, const std::string& header,
               size_t data_bytes) {
  std::ofstream out(path, std::ios::binary);
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>(declared_length >> (8 * i)));
  out << header << std::string(data_bytes, '\x01');
}

void write_header(const std::string& path, const std::string& header, size_t data_bytes) {
  write_raw(path, header.size(), header, data_bytes);
}

}  // namespace

TEST_CASE("safetensors round trip keeps dtype, shape and bits", "[safetensors]") {
  ScratchDir dir("st_roundtrip");
  const auto dtype = GENERATE(torch::kBFloat16, torch::kHalf, torch::kFloat, torch::kDouble,
                              torch::kLong, torch::kInt, torch::kByte, torch::kBool);
  const auto shape = GENERATE(std::vector<int64_t>{}, std::vector<int64_t>{0, 3},
                              std::vector<int64_t>{7}, std::vector<int64_t>{3, 5, 2});
  torch::manual_seed(11);
  std::map<std::string, torch::Tensor> tensors;
  tensors["a.weight"] = (torch::randn(shape) * 100).to(dtype);
  tensors["b"] = (torch::randn({4, 6}) * 100).to(dtype).t();  // non-contiguous input
  tensors["c.bias"] = torch::arange(5, torch::kFloat);
  const std::string path = dir.file("rt.safetensors");
  write_safetensors(path, tensors, {{"format", "pt"}, {"note", "x"}});

  const SafetensorsFile file(path);
  CHECK(file.names().size() == 3);
  CHECK(file.metadata().at("note") == "x");
  for (const auto& [name, expected] : tensors) {
    const torch::Tensor got = file.tensor(name);
    INFO(name << " " << c10::toString(dtype));
    CHECK(got.scalar_type() == expected.scalar_type());
    CHECK(got.sizes() == expected.sizes());
    CHECK(torch::equal(got, expected.contiguous()));
  }
}

TEST_CASE("safetensors tensors outlive the file object and the file, writes are private",
          "[safetensors]") {
  ScratchDir dir("st_lifetime");
  const std::string path = dir.file("l.safetensors");
  write_safetensors(path, {{"w", torch::arange(12, torch::kFloat).reshape({3, 4})}});
  torch::Tensor t;
  {
    const SafetensorsFile file(path);
    t = file.tensor("w");
  }
  fs::remove(path);
  CHECK(t.sum().item<float>() == 66.0f);
  write_safetensors(path, {{"w", torch::arange(12, torch::kFloat).reshape({3, 4})}});
  torch::Tensor u = SafetensorsFile(path).tensor("w");
  u.mul_(2);  // copy-on-write: the file keeps the original values
  CHECK(SafetensorsFile(path).tensor("w").sum().item<float>() == 66.0f);
  CHECK(u.sum().item<float>() == 132.0f);
}

TEST_CASE("safetensors reads a file written by python3-torch from the specification",
          "[safetensors]") {
  const std::string path =
      std::string(OMNIBAL_SOURCE_DIR) + "/tests/checkpoint/fixtures/spec_fixture.safetensors";
  const SafetensorsFile file(path);
  CHECK(file.metadata().at("written_by") == "make_safetensors_fixture.py");
  CHECK(file.names().size() == 6);
  auto pattern = [](std::vector<int64_t> shape, torch::Dtype dtype) {
    const int64_t n = c10::multiply_integers(shape);
    const auto idx = torch::arange(n, torch::kDouble);
    return (torch::fmod(idx, 13) * 0.25 - 1.5).to(dtype).reshape(shape);
  };
  const torch::Tensor bf = file.tensor("vision_model.embeddings.patch_embedding.weight");
  CHECK(bf.scalar_type() == torch::kBFloat16);
  CHECK(torch::equal(bf, pattern({4, 3, 2, 2}, torch::kBFloat16)));
  const torch::Tensor half = file.tensor("mlp1.1.weight");
  CHECK(half.scalar_type() == torch::kHalf);
  CHECK(torch::equal(half, pattern({5, 7}, torch::kHalf)));
  CHECK(torch::equal(file.tensor("language_model.model.norm.weight"), pattern({9}, torch::kFloat)));
  CHECK(torch::equal(file.tensor("step_counter"), torch::arange(3, torch::kLong) * 1000003 - 7));
  CHECK(torch::equal(file.tensor("positions"),
                     (torch::arange(6, torch::kInt) * 7 - 20).reshape({2, 3})));
  CHECK(file.tensor("empty").sizes() == std::vector<int64_t>{0, 4});
  // The fixture stores data in reverse name order: offsets, not names, give the layout.
  CHECK(file.entry("vision_model.embeddings.patch_embedding.weight").begin == 0);
}

TEST_CASE("safetensors refuses headers that lie, naming the file and the tensor", "[safetensors]") {
  ScratchDir dir("st_malformed");
  struct Case {
    const char* what;
    std::string header;
    size_t data_bytes;
    std::vector<std::string> expected;  // substrings of the error
  };
  const auto c = GENERATE(values<Case>({
      {"bad json", R"({"a": {"dtype": "F32", )", 0, {"not valid JSON"}},
      {"not an object", R"([1, 2])", 0, {"must be a JSON object"}},
      {"unknown dtype",
       R"({"w": {"dtype": "F8_E4M3", "shape": [2], "data_offsets": [0, 2]}})",
       2,
       {"tensor \"w\"", "unsupported dtype \"F8_E4M3\""}},
      {"out of range",
       R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})",
       8,
       {"tensor \"w\"", "out of range", "8 bytes"}},
      {"dtype size vs shape",
       R"({"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 12]}})",
       12,
       {"tensor \"w\"", "12 bytes in data_offsets", "needs 24 bytes"}},
      {"overlap",
       R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
       12,
       {"tensor \"b\"", "overlap tensor \"a\""}},
      {"gap",
       R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}})",
       12,
       {"gap of 4 bytes before tensor \"b\""}},
      {"trailing bytes",
       R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})",
       10,
       {"6 trailing bytes after the last tensor \"a\""}},
      {"end before begin",
       R"({"w": {"dtype": "U8", "shape": [0], "data_offsets": [4, 0]}})",
       4,
       {"tensor \"w\"", "end before begin"}},
      {"missing offsets",
       R"({"w": {"dtype": "U8", "shape": [1]}})",
       1,
       {"tensor \"w\"", "missing \"data_offsets\""}},
      {"negative offset",
       R"({"w": {"dtype": "U8", "shape": [1], "data_offsets": [-1, 0]}})",
       1,
       {"tensor \"w\"", "non-negative integers"}},
      {"negative dim",
       R"({"w": {"dtype": "U8", "shape": [-1], "data_offsets": [0, 1]}})",
       1,
       {"tensor \"w\"", "negative dimension"}},
      {"float dim",
       R"({"w": {"dtype": "U8", "shape": [1.5], "data_offsets": [0, 1]}})",
       1,
       {"tensor \"w\"", "array of integers"}},
      {"metadata value",
       R"({"__metadata__": {"k": 3}})",
       0,
       {"__metadata__[\"k\"] must be a string"}},
      {"duplicate name",
       R"({"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}, "a": {"dtype": "U8", "shape": [1], "data_offsets": [1, 2]}})",
       2,
       {"tensor \"a\" appears twice"}},
  }));
  INFO(c.what);
  const std::string path = dir.file("bad.safetensors");
  write_header(path, c.header, c.data_bytes);
  try {
    SafetensorsFile file(path);
    FAIL("no error for " << c.what);
  } catch (const omnibal::Error& e) {
    const std::string msg = e.what();
    INFO(msg);
    CHECK(msg.find(path) != std::string::npos);
    for (const auto& s : c.expected) CHECK(msg.find(s) != std::string::npos);
  }
}

TEST_CASE("safetensors refuses a short file and a header length beyond the file", "[safetensors]") {
  ScratchDir dir("st_length");
  const std::string path = dir.file("short.safetensors");
  { std::ofstream(path, std::ios::binary) << "abc"; }
  CHECK_THROWS_WITH(SafetensorsFile(path), Catch::Contains(path) && Catch::Contains("too short"));
  write_raw(path, 1000, R"({})", 0);
  CHECK_THROWS_WITH(SafetensorsFile(path),
                    Catch::Contains(path) &&
                        Catch::Contains("header length 1000 runs beyond the end"));
  CHECK_THROWS_WITH(SafetensorsFile(dir.file("absent.safetensors")),
                    Catch::Contains("cannot open"));
}

TEST_CASE("safetensors writer refuses unsupported dtypes and leaves no partial file",
          "[safetensors]") {
  ScratchDir dir("st_write");
  const std::string path = dir.file("w.safetensors");
  CHECK_THROWS_WITH(write_safetensors(path, {{"z", torch::zeros({2}, torch::kComplexFloat)}}),
                    Catch::Contains("tensor \"z\"") && Catch::Contains("unsupported dtype"));
  CHECK_FALSE(fs::exists(path));
  CHECK_THROWS_WITH(write_safetensors(dir.file("no/such/dir/x.safetensors"),
                                      {{"a", torch::zeros({1})}}),
                    Catch::Contains("cannot create"));
}
