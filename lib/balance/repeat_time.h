// InternVL's repeat_time: how many times, and which, records of one dataset of a meta file
// enter the training set. One rule for every reader (the planners' length reader and the
// trainer's sample table), so `omnibal-plan data`, `omnibal-plan simulate` and `omnibal-train`
// see the same samples. Torch-free; no I/O.
//
// Rule for n records and repeat_time r > 0 (r finite):
//   floor(r) full copies of records 0 .. n-1 in file order, then a subset of
//   k = floor((r - floor(r)) * n + 1e-6) distinct records drawn without replacement
//   (omnibal::Rng, partial Fisher–Yates, seeded by the run seed and the dataset's position) and listed
//   in ascending record order.
// So r = 2 gives 2n rows, r = 0.5 gives floor(n / 2) seeded-random records, r = 2.5 gives 2n
// rows plus floor(n / 2). The 1e-6 absorbs binary rounding of decimal factors (2.3 - 2 =
// 0.29999...; Python's int() would give one record fewer there). This follows InternVL's
// LazySupervisedDataset (internvl_chat/internvl/train/internvl_chat_finetune.py: r < 1 keeps
// int(n * r) records, prefix in early versions and random.sample in later ones; r > 1 repeats
// int(r) times) with the fractional part of r > 1 drawn as well, as XTuner's InternVL dataset
// does (int(r) copies + random.sample(int(n * (r - int(r))))). The subset is drawn once per run
// (the same for every epoch), with a seeded generator instead of Python's global random state.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace omnibal::balance {

/// Record indices in [0, records) that dataset `dataset` (its position in the meta file)
/// contributes for `repeat_time`, in table order (see the rule above); an index appears once
/// per copy. The subset is drawn with Rng(splitmix64 of (seed, dataset)), so datasets of the
/// same size and fraction draw different records; `seed` is balance.seed (the trainer) or
/// `omnibal-plan data --seed` (default 1024 both). `where` names the dataset in errors (e.g.
/// "meta.json: dataset \"ai2d\""). Throws omnibal::Error when repeat_time is not a finite
/// number > 0, when records < 0, or when the result would exceed 2^32 - 1 rows.
std::vector<uint32_t> repeat_records(int64_t records, double repeat_time, uint64_t seed,
                                     uint32_t dataset, const std::string& where);

}  // namespace omnibal::balance
