#include "data/tokenizer.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

#include "core/error.h"

#ifndef OMNIBAL_SPM_SHIM_PATH
#error "OMNIBAL_SPM_SHIM_PATH must name the omnibal_spm_shim shared library"
#endif

namespace omnibal::data {

// The SentencePiece entry points of the shim (spm_shim.cpp explains why it is dlopen'ed).
struct Tokenizer::Api {
  void* (*load)(const char*, char*, int) = nullptr;
  void (*free)(void*) = nullptr;
  int (*encode)(void*, const char*, int, int*, int) = nullptr;
  int (*decode)(void*, const int*, int, char*, int) = nullptr;
  int (*piece_to_id)(void*, const char*) = nullptr;
  int (*id_to_piece)(void*, int, char*, int) = nullptr;
  int (*info)(void*, int) = nullptr;
};

namespace {

template <typename F> void bind(void* lib, const char* name, F& fn, const std::string& path) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  OMNIBAL_CHECK(fn != nullptr, "SentencePiece shim '", path, "' lacks ", name);
}

const Tokenizer::Api& shim_api() {
  static Tokenizer::Api api;
  static std::once_flag once;
  std::call_once(once, [] {
    const char* env = std::getenv("OMNIBAL_SPM_SHIM");
    const std::string path = env && *env ? env : OMNIBAL_SPM_SHIM_PATH;
    void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    OMNIBAL_CHECK(lib != nullptr, "cannot load the SentencePiece shim '", path, "': ", dlerror(),
                  " (build target omnibal_spm_shim, or set OMNIBAL_SPM_SHIM)");
    bind(lib, "omnibal_spm_load", api.load, path);
    bind(lib, "omnibal_spm_free", api.free, path);
    bind(lib, "omnibal_spm_encode", api.encode, path);
    bind(lib, "omnibal_spm_decode", api.decode, path);
    bind(lib, "omnibal_spm_piece_to_id", api.piece_to_id, path);
    bind(lib, "omnibal_spm_id_to_piece", api.id_to_piece, path);
    bind(lib, "omnibal_spm_info", api.info, path);
  });
  return api;
}

}  // namespace

Tokenizer::Tokenizer(const std::string& model_path) : api_(&shim_api()), path_(model_path) {
  char error[512] = {0};
  handle_ = api_->load(model_path.c_str(), error, sizeof(error));
  OMNIBAL_CHECK(handle_ != nullptr, "tokenizer '", model_path, "' cannot be loaded: ", error);
  auto special_id = [&](const std::string& piece) {
    const int id = api_->piece_to_id(handle_, piece.c_str());
    OMNIBAL_CHECK(id != api_->info(handle_, 3) && this->piece(id) == piece, "tokenizer '",
                  model_path, "': special token ", piece,
                  " is not a single piece; train the model with it in --user_defined_symbols");
    return id;
  };
  special_.img_start = special_id("<img>");
  special_.img_end = special_id("</img>");
  special_.img_context = special_id("<IMG_CONTEXT>");
  special_.im_start = special_id("<|im_start|>");
  special_.im_end = special_id("<|im_end|>");
  special_.bos = api_->info(handle_, 1);
  const int pad = api_->info(handle_, 4), unk = api_->info(handle_, 3);
  special_.pad = pad >= 0 ? pad : std::max(0, unk);
}

Tokenizer::~Tokenizer() {
  if (handle_ != nullptr) api_->free(handle_);
}

std::vector<int32_t> Tokenizer::encode(const std::string& text) const {
  std::vector<int> ids(text.size() + 16);
  int n = api_->encode(handle_, text.data(), static_cast<int>(text.size()), ids.data(),
                       static_cast<int>(ids.size()));
  if (n > static_cast<int>(ids.size())) {
    ids.resize(n);
    n = api_->encode(handle_, text.data(), static_cast<int>(text.size()), ids.data(), n);
  }
  OMNIBAL_CHECK(n >= 0, "tokenizer '", path_, "': encoding failed");
  return std::vector<int32_t>(ids.begin(), ids.begin() + n);
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  const std::vector<int> in(ids.begin(), ids.end());
  std::string out(ids.size() * 16 + 16, '\0');
  int n = api_->decode(handle_, in.data(), static_cast<int>(in.size()), out.data(),
                       static_cast<int>(out.size()));
  if (n >= static_cast<int>(out.size())) {
    out.assign(n + 1, '\0');
    n = api_->decode(handle_, in.data(), static_cast<int>(in.size()), out.data(), n + 1);
  }
  OMNIBAL_CHECK(n >= 0, "tokenizer '", path_, "': decoding failed");
  out.resize(n);
  return out;
}

std::string Tokenizer::piece(int32_t id) const {
  std::string out(64, '\0');
  int n = api_->id_to_piece(handle_, id, out.data(), static_cast<int>(out.size()));
  if (n >= static_cast<int>(out.size())) {
    out.assign(n + 1, '\0');
    n = api_->id_to_piece(handle_, id, out.data(), n + 1);
  }
  out.resize(n);
  return out;
}

int Tokenizer::vocab_size() const { return api_->info(handle_, 0); }

}  // namespace omnibal::data
