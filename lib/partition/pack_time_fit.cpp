#include "partition/pack_time_fit.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <sstream>

#include "core/error.h"

namespace omnibal::partition {
namespace {

constexpr int kTerms = 4;
constexpr std::array<const char*, kTerms> kTermNames = {"fixed (per-pack)", "per-tile", "per-token",
                                                        "squared-length (attention)"};
// A column whose part outside the span of the earlier columns is below this fraction of its
// norm is not identified: its coefficient would be set by rounding noise.
constexpr double kIdentifiable = 1e-6;

std::array<bool, kTerms> chosen(const PackTimeTerms& t) {
  return {t.fixed, t.tiles, t.tokens, t.token_sq};
}

double regressor(const PackTimeObservation& o, int term) {
  switch (term) {
    case 0: return 1.0;
    case 1: return o.tiles;
    case 2: return o.tokens;
    default: return o.token_sq;
  }
}

// Why column `term` is not identified, for the error message.
std::string why_not_identified(const std::vector<PackTimeObservation>& obs, int term) {
  const char* unit[] = {"", "tiles", "tokens", "tokens^2 of squared lengths"};
  double lo = regressor(obs[0], term), hi = lo;
  for (const auto& o : obs) {
    lo = std::min(lo, regressor(o, term));
    hi = std::max(hi, regressor(o, term));
  }
  std::ostringstream s;
  if (term > 0 && lo == hi) s << "every load has " << lo << " " << unit[term];
  else s << "over these loads it moves in proportion to the terms before it";
  return s.str();
}

}  // namespace

double table_pack_seconds(const UnitCostTable& table) {
  double s = 0;
  for (const auto& u : table.units) s += u.forward_s + u.backward_s;
  return s;
}

PackTimeFit fit_pack_time(const std::vector<PackTimeObservation>& obs, const PackTimeTerms& terms,
                          const std::string& origin) {
  const auto use = chosen(terms);
  std::vector<int> cols;
  for (int t = 0; t < kTerms; ++t)
    if (use[t]) cols.push_back(t);
  OMNIBAL_CHECK(!cols.empty(), origin, ": pack time fit with no term chosen");
  OMNIBAL_CHECK(obs.size() >= cols.size(), origin, ": ", obs.size(), " load(s) cannot identify ",
                cols.size(), " terms of the pack time model; give at least ", cols.size());
  for (size_t i = 0; i < obs.size(); ++i)
    OMNIBAL_CHECK(obs[i].seconds > 0 && std::isfinite(obs[i].seconds), origin, ": load ", i, " (",
                  obs[i].tiles, " tiles, ", obs[i].tokens, " tokens) has ", obs[i].seconds,
                  " s; expected a positive time");
  // Least squares by modified Gram-Schmidt on columns scaled to unit norm: A = Q R, R c = Q^T y.
  const size_t n = obs.size(), k = cols.size();
  std::vector<std::vector<double>> q(k, std::vector<double>(n));
  std::vector<double> scale(k), r(k * k, 0.0);
  for (size_t j = 0; j < k; ++j) {
    double norm = 0;
    for (size_t i = 0; i < n; ++i) {
      q[j][i] = regressor(obs[i], cols[j]);
      norm += q[j][i] * q[j][i];
    }
    norm = std::sqrt(norm);
    OMNIBAL_CHECK(norm > 0, origin, ": the loads do not identify the ", kTermNames[cols[j]],
                  " term (", why_not_identified(obs, cols[j]),
                  "); vary it across loads or leave the term out");
    scale[j] = norm;
    for (double& v : q[j]) v /= norm;
    for (size_t p = 0; p < j; ++p) {
      double dot = 0;
      for (size_t i = 0; i < n; ++i) dot += q[p][i] * q[j][i];
      r[p * k + j] = dot;
      for (size_t i = 0; i < n; ++i) q[j][i] -= dot * q[p][i];
    }
    double rest = 0;
    for (double v : q[j]) rest += v * v;
    rest = std::sqrt(rest);
    OMNIBAL_CHECK(rest > kIdentifiable, origin, ": the loads do not identify the ",
                  kTermNames[cols[j]], " term (", why_not_identified(obs, cols[j]),
                  "); vary it across loads or leave the term out");
    r[j * k + j] = rest;
    for (double& v : q[j]) v /= rest;
  }
  std::vector<double> c(k, 0.0);
  for (size_t j = 0; j < k; ++j)
    for (size_t i = 0; i < n; ++i) c[j] += q[j][i] * obs[i].seconds;
  for (size_t j = k; j-- > 0;) {  // back substitution
    for (size_t p = j + 1; p < k; ++p) c[j] -= r[j * k + p] * c[p];
    c[j] /= r[j * k + j];
  }
  PackTimeFit fit;
  fit.terms = terms;
  fit.observations = n;
  fit.model.source = origin;
  double* coef[kTerms] = {&fit.model.fixed_s, &fit.model.per_tile_s, &fit.model.per_token_s,
                          &fit.model.per_token_sq_s};
  for (size_t j = 0; j < k; ++j) *coef[cols[j]] = c[j] / scale[j];
  const balance::PackTimeModel& m = fit.model;
  double sq = 0;
  for (const auto& o : obs) {
    const double predicted = m.fixed_s + m.per_tile_s * o.tiles + m.per_token_s * o.tokens +
                             m.per_token_sq_s * o.token_sq;
    const double rel = std::abs(predicted - o.seconds) / o.seconds;
    fit.max_rel_residual = std::max(fit.max_rel_residual, rel);
    sq += rel * rel;
  }
  fit.rms_rel_residual = std::sqrt(sq / static_cast<double>(n));
  return fit;
}

PackTimeFit fit_pack_time(const CostModel& model, const std::vector<MicroBatchLoad>& loads,
                          const PackTimeTerms& terms, const std::string& origin) {
  std::vector<PackTimeObservation> obs;
  obs.reserve(loads.size());
  for (const auto& l : loads)
    obs.push_back({static_cast<double>(l.tiles()), static_cast<double>(l.computed_tokens()),
                   l.attention_square_sum(), table_pack_seconds(model.costs(l))});
  return fit_pack_time(obs, terms, origin);
}

PackTimeFit fit_pack_time(const std::vector<UnitCostTable>& tables,
                          const std::vector<std::string>& origins, const PackTimeTerms& terms) {
  OMNIBAL_CHECK(tables.size() == origins.size(), "fit_pack_time: ", tables.size(), " tables, ",
                origins.size(), " names");
  OMNIBAL_CHECK(!tables.empty(), "fit_pack_time: no cost table given");
  std::vector<PackTimeObservation> obs;
  std::string all;
  for (size_t i = 0; i < tables.size(); ++i) {
    const auto& t = tables[i];
    OMNIBAL_CHECK(t.model == tables[0].model && t.units.size() == tables[0].units.size() &&
                      t.tp == tables[0].tp,
                  origins[i], ": model '", t.model, "' with ", t.units.size(), " units at tp ",
                  t.tp, ", but ", origins[0], " has '", tables[0].model, "' with ",
                  tables[0].units.size(), " units at tp ", tables[0].tp,
                  "; fit tables of one model and tp");
    OMNIBAL_CHECK(!terms.token_sq || t.load.token_sq_sum > 0, origins[i],
                  ": load.token_sq_sum is missing, so the squared-length (attention) term cannot ",
                  "be fitted; leave that term out");
    obs.push_back({static_cast<double>(t.load.tiles), static_cast<double>(t.load.tokens),
                   t.load.token_sq_sum, table_pack_seconds(t)});
    all += (i ? ", " : "") + origins[i];
  }
  return fit_pack_time(obs, terms, "profiled tables " + all);
}

balance::PackTimeModel scaled_pack_time(const UnitCostTable& table, const std::string& origin) {
  OMNIBAL_CHECK(table.load.tiles > 0 && table.load.tokens > 0, origin,
                ": the table's load needs tiles > 0 and tokens > 0 to scale, got ",
                table.load.tiles, " tiles and ", table.load.tokens, " tokens");
  double vit = 0, rest = 0;
  for (const auto& u : table.units) (is_vision(u.kind) ? vit : rest) += u.forward_s + u.backward_s;
  balance::PackTimeModel m;
  m.per_tile_s = vit / static_cast<double>(table.load.tiles);
  m.per_token_s = rest / static_cast<double>(table.load.tokens);
  m.source = "scaled:" + origin;
  return m;
}

std::vector<MicroBatchLoad> pack_time_design(int64_t max_tiles, int64_t max_tokens) {
  OMNIBAL_CHECK(max_tiles >= 4 && max_tokens >= 32, "pack_time_design: expected at least 4 tiles ",
                "and 32 tokens per pack, got ", max_tiles, " and ", max_tokens);
  std::vector<MicroBatchLoad> loads;
  for (int ft = 1; ft <= 4; ++ft) {
    for (int fn = 1; fn <= 4; ++fn) {
      for (int samples : {1, 2, 4, 8}) {
        const int64_t tiles = max_tiles * ft / 4, tokens = max_tokens * fn / 4;
        std::vector<int32_t> t(samples), n(samples);
        for (int s = 0; s < samples; ++s) {  // equal shares, the remainder to the first ones
          t[s] = static_cast<int32_t>(tiles / samples + (s < tiles % samples));
          n[s] = static_cast<int32_t>(tokens / samples + (s < tokens % samples));
        }
        loads.push_back(MicroBatchLoad::packed(std::move(t), std::move(n)));
      }
    }
  }
  return loads;
}

}  // namespace omnibal::partition
