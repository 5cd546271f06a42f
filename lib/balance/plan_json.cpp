#include "balance/plan_json.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fstream>

#include "core/error.h"
#include "core/rng.h"

namespace omnibal::balance {
namespace {

using Json = nlohmann::json;
constexpr const char* kFormat = "omnibal.data_plan.v1";

// Streaming hash shared by both plan_hash overloads, so file and memory agree.
class PlanHasher {
 public:
  PlanHasher(int dp, int m) {
    mix(static_cast<uint64_t>(dp));
    mix(static_cast<uint64_t>(m));
  }
  void begin_pack() { mix(0xffffffffULL); }
  void sample(uint32_t dataset, uint32_t index) {
    mix((static_cast<uint64_t>(dataset) << 32) | index);
  }
  void begin_carried() { mix(0xcafeULL); }
  uint64_t value() const { return h_; }

 private:
  void mix(uint64_t v) {
    uint64_t s = h_ ^ v;
    h_ = splitmix64(s);
  }
  uint64_t h_ = 0x6f6d6e6962616cULL;  // "omnibal"
};

Json pack_json(const SampleTable& t, const PackList& packs, uint32_t p) {
  Json j = Json::array();
  for (const uint32_t* it = packs.begin(p); it != packs.end(p); ++it)
    j.push_back({t.dataset[*it], t.index[*it]});
  return j;
}

std::vector<SampleRef> read_pack(const Json& j, const std::string& where) {
  OMNIBAL_CHECK(j.is_array(), where, ": expected an array of [dataset, index] pairs");
  std::vector<SampleRef> out;
  out.reserve(j.size());
  for (size_t i = 0; i < j.size(); ++i) {
    const Json& e = j[i];
    OMNIBAL_CHECK(e.is_array() && e.size() == 2 && e[0].is_number_unsigned() &&
                      e[1].is_number_unsigned(),
                  where, "[", i, "]: expected [dataset, index], got ", e.dump());
    out.push_back({e[0].get<uint32_t>(), e[1].get<uint32_t>()});
  }
  return out;
}

const Json& key(const Json& doc, const char* k, const std::string& path) {
  const auto it = doc.find(k);
  OMNIBAL_CHECK(it != doc.end(), path, ": missing key \"", k, "\"");
  return *it;
}

}  // namespace

nlohmann::json metrics_json(const BalanceMetrics& m) {
  Json j = {{"pad_ratio", m.pad_ratio},
            {"dist_ratio_vit", m.dist_ratio_vit},
            {"dist_ratio_llm", m.dist_ratio_llm},
            {"tile_fill", m.tile_fill},
            {"token_fill", m.token_fill},
            {"packs", m.packs},
            {"samples", m.samples},
            {"samples_per_pack", m.samples_per_pack},
            {"max_tiles", m.max_tiles},
            {"max_tokens", m.max_tokens},
            {"skipped", m.skipped},
            {"steps", m.steps},
            {"carried_packs", m.carried_packs},
            {"carried_samples", m.carried_samples}};
  if (m.has_time) {
    j["cost_dist_ratio_dp"] = m.cost_dist_ratio_dp;
    j["cost_dist_ratio_mb"] = m.cost_dist_ratio_mb;
    j["step_seconds"] = m.step_seconds;
  }
  return j;
}

uint64_t plan_hash(const SampleTable& table, const PackList& packs, const StepPlan& plan) {
  PlanHasher h(plan.dp, plan.micro_batches);
  auto add = [&](uint32_t p) {
    h.begin_pack();
    for (const uint32_t* it = packs.begin(p); it != packs.end(p); ++it)
      h.sample(table.dataset[*it], table.index[*it]);
  };
  for (uint32_t p : plan.slots) add(p);
  h.begin_carried();
  for (uint32_t p : plan.carried) add(p);
  return h.value();
}

uint64_t plan_hash(const PlanFile& plan) {
  PlanHasher h(plan.dp, plan.micro_batches);
  auto add = [&](const std::vector<SampleRef>& pack) {
    h.begin_pack();
    for (const auto& s : pack) h.sample(s.dataset, s.index);
  };
  for (const auto& p : plan.slots) add(p);
  h.begin_carried();
  for (const auto& p : plan.carried) add(p);
  return h.value();
}

std::string format_hash(uint64_t hash) { return fmt::format("{:016x}", hash); }

void write_plan_json(const std::string& path, const SampleTable& table, const MethodResult& r,
                     const PlannerOptions& o) {
  Json doc;
  doc["format"] = kFormat;
  doc["method"] = method_name(r.method);
  doc["dp"] = r.plan.dp;
  doc["micro_batches"] = r.plan.micro_batches;
  doc["seed"] = o.seed;
  doc["samples_per_pack"] = o.samples_per_pack;
  doc["budgets"] = {{"q_vit", r.budgets.q_vit},
                    {"q_tok", r.budgets.q_tok},
                    {"q_tok_thresh", r.budgets.q_tok_thresh},
                    {"iterations", o.iterations}};
  Json ds = Json::array();
  for (const auto& d : table.datasets)
    ds.push_back({{"name", d.name},
                  {"path", d.path},
                  {"records", d.records},
                  {"failed_stats", d.failed_stats},
                  {"repeat_time", d.repeat_time}});
  doc["datasets"] = ds;
  doc["plan_hash"] = format_hash(plan_hash(table, r.packing.packs, r.plan));
  Json steps = Json::array();
  for (size_t s = 0; s < r.plan.steps(); ++s) {
    Json ranks = Json::array();
    for (int rank = 0; rank < r.plan.dp; ++rank) {
      Json micro = Json::array();
      for (int k = 0; k < r.plan.micro_batches; ++k)
        micro.push_back(pack_json(table, r.packing.packs, r.plan.pack(s, rank, k)));
      ranks.push_back(std::move(micro));
    }
    steps.push_back(std::move(ranks));
  }
  doc["steps"] = std::move(steps);
  Json carried = Json::array();
  for (uint32_t p : r.plan.carried) carried.push_back(pack_json(table, r.packing.packs, p));
  doc["carried"] = std::move(carried);
  Json skipped = Json::array();
  for (uint32_t id : r.packing.skipped) skipped.push_back({table.dataset[id], table.index[id]});
  doc["skipped"] = std::move(skipped);
  doc["metrics"] = metrics_json(r.metrics);
  std::ofstream out(path);
  OMNIBAL_CHECK(out.good(), path, ": cannot write the plan file");
  out << doc.dump() << "\n";
  OMNIBAL_CHECK(out.good(), path, ": writing the plan file failed");
}

PlanFile read_plan_json(const std::string& path) {
  std::ifstream in(path);
  OMNIBAL_CHECK(in.good(), path, ": cannot open plan file");
  Json doc;
  try {
    doc = Json::parse(in);
  } catch (const Json::parse_error& e) {
    OMNIBAL_FAIL(path, ": not valid JSON (plan file): ", e.what());
  }
  OMNIBAL_CHECK(doc.is_object() && doc.value("format", "") == kFormat, path,
                ": not a data plan (expected \"format\": \"", kFormat, "\")");
  PlanFile p;
  try {
    p.method = key(doc, "method", path).get<std::string>();
    p.dp = key(doc, "dp", path).get<int>();
    p.micro_batches = key(doc, "micro_batches", path).get<int>();
    p.seed = key(doc, "seed", path).get<uint64_t>();
    p.samples_per_pack = key(doc, "samples_per_pack", path).get<int>();
    const Json& b = key(doc, "budgets", path);
    p.budgets = {b.at("q_vit").get<int64_t>(), b.at("q_tok").get<int64_t>(),
                 b.at("q_tok_thresh").get<int64_t>()};
    p.iterations = b.at("iterations").get<int>();
    for (const Json& d : key(doc, "datasets", path))
      p.datasets.push_back({d.at("name").get<std::string>(), d.at("path").get<std::string>(),
                            d.at("records").get<int64_t>(), d.at("failed_stats").get<int64_t>(),
                            d.at("repeat_time").get<double>()});
  } catch (const Json::exception& e) {
    OMNIBAL_FAIL(path, ": malformed plan header: ", e.what());
  }
  OMNIBAL_CHECK(p.dp >= 1 && p.micro_batches >= 1, path, ": dp and micro_batches must be >= 1");
  const Json& steps = key(doc, "steps", path);
  for (size_t s = 0; s < steps.size(); ++s) {
    const std::string where = path + ": steps[" + std::to_string(s) + "]";
    OMNIBAL_CHECK(steps[s].is_array() && steps[s].size() == static_cast<size_t>(p.dp), where,
                  ": expected ", p.dp, " DP ranks");
    for (int r = 0; r < p.dp; ++r) {
      const Json& micro = steps[s][r];
      OMNIBAL_CHECK(micro.is_array() && micro.size() == static_cast<size_t>(p.micro_batches), where,
                    "[", r, "]: expected ", p.micro_batches, " micro-batches");
      for (int k = 0; k < p.micro_batches; ++k)
        p.slots.push_back(
            read_pack(micro[k], where + "[" + std::to_string(r) + "][" + std::to_string(k) + "]"));
    }
  }
  const Json& carried = key(doc, "carried", path);
  for (size_t c = 0; c < carried.size(); ++c)
    p.carried.push_back(read_pack(carried[c], path + ": carried[" + std::to_string(c) + "]"));
  p.skipped = read_pack(key(doc, "skipped", path), path + ": skipped");
  const std::string stored = key(doc, "plan_hash", path).get<std::string>();
  p.hash = std::stoull(stored, nullptr, 16);
  OMNIBAL_CHECK(p.hash == plan_hash(p), path, ": plan_hash ", stored, " does not match the ",
                "plan's content (", format_hash(plan_hash(p)), "): the file was edited or cut");
  return p;
}

}  // namespace omnibal::balance
