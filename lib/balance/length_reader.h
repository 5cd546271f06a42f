// Reading per-sample length statistics into a SampleTable.
//
// Two inputs are supported (docs/paper.md#sample-statistics, #conversation-format):
//  - an OmniBal length file: a JSON array of {"vit_num": int, "token_num": int,
//    "image_flags": int}, one element per sample in annotation order;
//  - an InternVL-style meta file: a JSON object mapping dataset names to {"token_lengths": path,
//    "repeat_time": number, ...} (other keys such as root/annotation are ignored here);
//    repeat_time is expanded by repeat_time.h, the rule the trainer uses too.
// A record with vit_num = -1 marks failed statistics: the reference skips it, and so do we, but
// it is counted (DatasetInfo::failed_stats) so that no sample disappears silently. Anything else
// malformed (not an array, not an object, missing/negative/non-integer fields, image_flags above
// vit_num) is an omnibal::Error naming the file and the element index. This file does not read
// images or annotations.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "balance/sample_table.h"

namespace omnibal::balance {

/// Appends the records of one OmniBal length file to `table` as dataset `name` (dataset id =
/// its position in `table`). repeat_time follows repeat_time.h's rule (floor(r) full copies
/// plus a subset of floor(frac * n) records seeded by `seed` and that position); repeats keep
/// their file index. image_flags is optional and defaults to vit_num. Throws omnibal::Error on
/// unreadable or malformed input (file, element) or a repeat_time that is not > 0.
void read_length_file(const std::string& path, const std::string& name, double repeat_time,
                      uint64_t seed, SampleTable& table);

/// Reads several length files, one dataset each, named after the file stem (the part before
/// "_token_lengths.json" / ".json").
SampleTable read_length_files(const std::vector<std::string>& paths);

/// Reads an InternVL-style meta file; relative token_lengths paths are resolved against the
/// meta file's directory. Datasets keep the file's key order; repeat_time (default 1) is
/// applied with `seed` (balance.seed, as the trainer does, so both see the same samples).
/// Throws omnibal::Error naming the meta file and dataset key when an entry is malformed.
SampleTable read_meta_file(const std::string& meta_path, uint64_t seed);

/// The dataset name read_length_files gives `path` (its file name without the suffixes above).
std::string dataset_name_from_path(const std::string& path);

}  // namespace omnibal::balance
