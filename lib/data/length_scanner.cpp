#include "data/length_scanner.h"

#include <atomic>
#include <exception>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/error.h"

namespace omnibal::data {

ScanResult scan_lengths(const ConversationDataset& dataset, const SampleProcessor& processor,
                        OnBadSample policy, int threads) {
  OMNIBAL_CHECK(threads >= 1, "scan: threads must be >= 1, got ", threads);
  ScanResult result;
  std::vector<SampleLengths> flat(static_cast<size_t>(dataset.size()));
  std::atomic<int64_t> next{0};
  std::mutex error_mutex;
  int64_t error_index = -1;
  std::exception_ptr error;
  // Every sample is scanned; the error reported is the one of the lowest global index, so the
  // message does not depend on thread timing.
  auto keep_first_error = [&](int64_t g) {
    std::lock_guard<std::mutex> lock(error_mutex);
    if (error_index < 0 || g < error_index) {
      error_index = g;
      error = std::current_exception();
    }
  };
  constexpr int64_t kChunk = 64;
  auto work = [&] {
    for (int64_t begin = next.fetch_add(kChunk); begin < dataset.size();
         begin = next.fetch_add(kChunk)) {
      const int64_t end = std::min(begin + kChunk, dataset.size());
      for (int64_t g = begin; g < end; ++g) {
        const AnnotationEntry& e = dataset.entry(g);
        try {
          if (e.error) throw *e.error;
          flat[g] = processor.measure(*e.record, dataset.root_of(g));
        } catch (const BadSampleError& bad) {
          flat[g] = kSkippedLengths;
          if (policy == OnBadSample::kSkip) {
            result.bad.add(bad);
          } else {
            keep_first_error(g);
          }
        } catch (...) {
          keep_first_error(g);
        }
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
  for (int d = 0; d < dataset.num_datasets(); ++d) {
    const auto begin = flat.begin() + dataset.offset(d);
    result.lengths.emplace_back(begin, begin + static_cast<int64_t>(dataset.entries(d).size()));
  }
  return result;
}

namespace {

nlohmann::ordered_json to_json(const std::vector<SampleLengths>& lengths) {
  nlohmann::ordered_json array = nlohmann::ordered_json::array();
  for (const auto& l : lengths) {
    nlohmann::ordered_json o;
    o["vit_num"] = l.vit_num;
    o["token_num"] = l.token_num;
    o["image_flags"] = l.image_flags;
    array.push_back(o);
  }
  return array;
}

void write_json(const std::string& path, const nlohmann::ordered_json& j) {
  std::ofstream out(path);
  OMNIBAL_CHECK(out.good(), "cannot write '", path, "'");
  out << j.dump(1) << "\n";
  OMNIBAL_CHECK(out.good(), "writing '", path, "' failed");
}

}  // namespace

void write_length_file(const std::string& path, const std::vector<SampleLengths>& lengths) {
  write_json(path, to_json(lengths));
}

std::vector<SampleLengths> read_length_file(const std::string& path) {
  std::ifstream in(path);
  OMNIBAL_CHECK(in.good(), "length file '", path, "' cannot be opened");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    OMNIBAL_FAIL(path, ": not valid JSON: ", e.what());
  }
  OMNIBAL_CHECK(j.is_array(), path, ": expected a JSON array of {vit_num, token_num, image_flags}");
  std::vector<SampleLengths> lengths;
  for (size_t i = 0; i < j.size(); ++i) {
    const auto& o = j[i];
    for (const char* key : {"vit_num", "token_num", "image_flags"}) {
      OMNIBAL_CHECK(o.is_object() && o.contains(key) && o[key].is_number_integer(), path,
                    "[element ", i, "]: expected integer '", key, "'");
    }
    lengths.push_back({o["vit_num"].get<int64_t>(), o["token_num"].get<int64_t>(),
                       o["image_flags"].get<int64_t>()});
  }
  return lengths;
}

std::vector<std::string> write_scan(const std::string& out, const ConversationDataset& dataset,
                                    const ScanResult& result) {
  namespace fs = std::filesystem;
  if (fs::path(out).extension() == ".json") {
    std::vector<SampleLengths> all;
    for (const auto& l : result.lengths) all.insert(all.end(), l.begin(), l.end());
    if (fs::path(out).has_parent_path()) fs::create_directories(fs::path(out).parent_path());
    write_length_file(out, all);
    return {out};
  }
  fs::create_directories(out);
  std::vector<std::string> written;
  std::vector<DatasetMetaEntry> metas;
  for (int d = 0; d < dataset.num_datasets(); ++d) {
    DatasetMetaEntry m = dataset.meta(d);
    const std::string file = (fs::path(out) / (m.name + "_token_lengths.json")).string();
    write_length_file(file, result.lengths[d]);
    written.push_back(file);
    m.root = fs::absolute(m.root).lexically_normal().string();
    m.annotation = fs::absolute(m.annotation).lexically_normal().string();
    m.token_lengths = fs::absolute(file).lexically_normal().string();
    m.length = static_cast<int64_t>(result.lengths[d].size());
    metas.push_back(std::move(m));
  }
  const std::string meta_path = (fs::path(out) / "meta.json").string();
  write_dataset_meta(meta_path, metas);
  written.push_back(meta_path);
  return written;
}

}  // namespace omnibal::data
