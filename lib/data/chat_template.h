// Conversation -> token ids and labels with a chat template, and each `<image>` expanded to
// <img> + tokens_per_tile * tiles x <IMG_CONTEXT> + </img> (docs/paper.md). Labels are -100
// everywhere except the assistant replies and the <|im_end|> that closes them, as InternVL's
// preprocess_internlm does. Text between special tokens is encoded piece by piece, so special
// tokens can never merge with text. Templates: `internlm2-chat` (InternVL's MPT-style
// "<|im_start|>user\n...<|im_end|><|im_start|>assistant\n...<|im_end|>"; the system turn is
// written only when a system message is set, since InternVL's default one is a long Chinese
// sentence that a small demo tokenizer cannot encode usefully).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/sample_record.h"
#include "data/tokenizer.h"

namespace omnibal::data {

/// Label of a token that carries no loss.
inline constexpr int32_t kIgnoreLabel = -100;

/// One sample's token ids and labels, same length.
struct TokenizedSample {
  std::vector<int32_t> input_ids;
  std::vector<int32_t> labels;  ///< kIgnoreLabel except assistant replies (+ their <|im_end|>)
};

/// A chat template bound to a tokenizer.
class ChatTemplate {
 public:
  /// `name` selects the template (`internlm2-chat`); throws omnibal::Error listing the known
  /// names otherwise. `system_message` empty = no system turn.
  ChatTemplate(const Tokenizer& tokenizer, const std::string& name,
               std::string system_message = "");

  /// Renders `record`: image k (in placeholder order) becomes tokens_per_tile * tiles[k]
  /// <IMG_CONTEXT> between <img> and </img>. A single image without a placeholder is put in
  /// front of the first human turn as "<image>\n" (InternVL's rule). `tiles` must hold one count
  /// per image (empty for text-only: no expansion; the dummy tile has no tokens).
  TokenizedSample render(const SampleRecord& record, const std::vector<int>& tiles,
                         int tokens_per_tile) const;

  /// Names of the templates this build knows.
  static std::vector<std::string> names();

 private:
  void append_text(const std::string& text, bool trained, TokenizedSample& out) const;
  void append_value(const std::string& value, bool trained, const std::vector<int>& tiles,
                    int tokens_per_tile, size_t& next_image, TokenizedSample& out) const;

  const Tokenizer& tokenizer_;
  std::string name_;
  std::string system_message_;
};

}  // namespace omnibal::data
