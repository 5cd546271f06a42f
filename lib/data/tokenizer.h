// Text to token ids with SentencePiece (Debian libsentencepiece-dev), plus the ids of the
// special tokens the chat template and image expansion need: <img>, </img>, <IMG_CONTEXT>,
// <|im_start|>, <|im_end|>. They must be single pieces of the model (train it with them as
// user_defined_symbols, as scripts/make_demo_data.sh does); loading checks that. SentencePiece
// itself is reached through a small dlopen'ed shim (spm_shim.cpp says why).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace omnibal::data {

/// Ids of the special tokens (each a single piece of the model).
struct SpecialTokens {
  int32_t img_start = -1;    ///< <img>
  int32_t img_end = -1;      ///< </img>
  int32_t img_context = -1;  ///< <IMG_CONTEXT>, replaced by ViT features in the model
  int32_t im_start = -1;     ///< <|im_start|>
  int32_t im_end = -1;       ///< <|im_end|>
  int32_t bos = -1;          ///< beginning of sequence, -1 when the model has none
  int32_t pad = 0;           ///< padding id (the model's pad, else unk, else 0)
};

/// A loaded SentencePiece model. Thread-safe (SentencePiece's Encode and Decode are const).
class Tokenizer {
 public:
  /// Loads a `.model` file. Throws omnibal::Error naming the file when it cannot be loaded or a
  /// special token is not a single piece.
  explicit Tokenizer(const std::string& model_path);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  /// Token ids of `text` (no BOS/EOS added).
  std::vector<int32_t> encode(const std::string& text) const;
  /// Text of `ids` (special pieces included verbatim).
  std::string decode(const std::vector<int32_t>& ids) const;
  /// The piece string of one id.
  std::string piece(int32_t id) const;
  /// Vocabulary size of the model (must be <= the preset's llm.vocab_size).
  int vocab_size() const;
  /// Special token ids.
  const SpecialTokens& special() const { return special_; }
  /// The model file this tokenizer was loaded from.
  const std::string& path() const { return path_; }

  struct Api;  ///< the shim's entry points (tokenizer.cpp)

 private:
  const Api* api_ = nullptr;
  void* handle_ = nullptr;
  SpecialTokens special_;
  std::string path_;
};

}  // namespace omnibal::data
