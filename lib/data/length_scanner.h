// The length scan behind `omnibal-plan scan`: per-sample vit_num, token_num and image_flags of
// every dataset of a meta file, computed on worker threads without decoding pixels (record
// width/height when present, image headers otherwise), written in the OmniBal length format
// `[{"vit_num", "token_num", "image_flags"}, ...]` (docs/paper.md) that `omnibal-plan data` reads.
// A bad sample stops the scan (on_bad_sample: error) or is written as vit_num = -1 and counted
// by reason (skip), so element i of a length file is always sample i of its annotation file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/bad_sample.h"
#include "data/conversation_dataset.h"
#include "data/sample_processor.h"

namespace omnibal::data {

/// Result of scanning one meta file.
struct ScanResult {
  std::vector<std::vector<SampleLengths>> lengths;  ///< [dataset][element]
  BadSampleCounts bad;                              ///< skipped samples by reason
};

/// Scans every sample of `dataset` with `threads` threads (>= 1). Under kError the bad sample
/// of the lowest global index throws its BadSampleError once all samples are scanned.
ScanResult scan_lengths(const ConversationDataset& dataset, const SampleProcessor& processor,
                        OnBadSample policy, int threads);

/// Writes one length file (JSON array of {vit_num, token_num, image_flags}).
void write_length_file(const std::string& path, const std::vector<SampleLengths>& lengths);

/// Reads a length file written by write_length_file (or shipped by OmniBal). Throws
/// omnibal::Error naming the file and element on a bad entry.
std::vector<SampleLengths> read_length_file(const std::string& path);

/// Writes a scan: when `out` ends in ".json", one file with every dataset's lengths
/// concatenated in meta order (global sample index); otherwise `out` is a directory that gets
/// `<name>_token_lengths.json` per dataset and `meta.json` (the input meta with token_lengths
/// set to those files). Returns the files written.
std::vector<std::string> write_scan(const std::string& out, const ConversationDataset& dataset,
                                    const ScanResult& result);

}  // namespace omnibal::data
