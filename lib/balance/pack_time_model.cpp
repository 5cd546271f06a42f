#include "balance/pack_time_model.h"

#include <cmath>

#include "core/error.h"

namespace omnibal::balance {

void PackTimeModel::validate(const std::string& where) const {
  const double c[] = {fixed_s, per_tile_s, per_token_s, per_token_sq_s};
  for (double v : c)
    OMNIBAL_CHECK(std::isfinite(v), where,
                  ": the pack time model has a non-finite coefficient (fixed ", fixed_s, " s, ",
                  per_tile_s, " s/tile, ", per_token_s, " s/token, ", per_token_sq_s,
                  " s/token^2)");
  OMNIBAL_CHECK(per_tile_s > 0 || per_token_s > 0 || per_token_sq_s > 0, where,
                ": the pack time model has no positive load coefficient (", per_tile_s, " s/tile, ",
                per_token_s, " s/token, ", per_token_sq_s, " s/token^2): it cannot rank packs");
}

std::vector<double> pack_seconds(const PackTimeModel& model, const PackList& packs) {
  std::vector<double> t(packs.size());
  for (size_t p = 0; p < packs.size(); ++p) t[p] = model.pack_seconds(packs, p);
  return t;
}

}  // namespace omnibal::balance
