// Start-up checks of a data set against the model and the config, shared by `omnibal-plan scan`
// and the trainer's load path (train/training_data.h's load_set, for data.meta and
// data.eval_meta), so both refuse the same input with the same words: a tokenizer with more
// pieces than the preset's embedding has rows (which would otherwise fail in step 0's forward,
// naming neither file nor sizes), and datasets of a meta file that hold no usable sample.
#pragma once

#include <string>
#include <vector>

#include "core/model_preset.h"
#include "data/conversation_dataset.h"
#include "data/sample_processor.h"
#include "data/tokenizer.h"

namespace omnibal::data {

/// Throws omnibal::Error when `tokenizer` has more pieces than `preset`'s llm.vocab_size (ids at
/// or over it have no embedding row), naming data.tokenizer's file, its piece count,
/// model.preset (`preset_name`) and llm.vocab_size.
void check_tokenizer_fits(const Tokenizer& tokenizer, const ModelPreset& preset,
                          const std::string& preset_name);

/// The datasets of `meta_path` (loaded as `dataset`) without a usable sample: an annotation
/// file with no records, or one whose every record was skipped as bad under
/// data.on_bad_sample: skip (vit_num < 0 in `lengths`, indexed by global sample id). With
/// `allow` false (data.allow_empty_datasets) throws omnibal::Error naming the meta file, every
/// such dataset and its annotation file; with `allow` true returns one warning line per such
/// dataset (empty when there is none) for the caller to log.
std::vector<std::string> check_empty_datasets(const std::string& meta_path,
                                              const ConversationDataset& dataset,
                                              const std::vector<SampleLengths>& lengths,
                                              bool allow);

}  // namespace omnibal::data
