// A C interface to SentencePiece, built as its own shared library and loaded by tokenizer.cpp
// with dlopen(RTLD_LOCAL | RTLD_DEEPBIND). Why: Debian's libsentencepiece bundles protobuf-lite
// 3.14 and exports its symbols, while LibTorch loads libprotobuf 3.21; linked into one process,
// whichever comes first interposes on the other and static initialisation aborts or crashes.
// Loaded locally with deep binding, SentencePiece keeps its own protobuf and torch never sees it.
// Only C types cross this boundary.
#include <sentencepiece_processor.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace {
using Processor = sentencepiece::SentencePieceProcessor;
Processor* as_sp(void* handle) { return static_cast<Processor*>(handle); }
int copy_out(const std::string& s, char* out, int capacity) {
  if (capacity > 0) {
    const size_t n = std::min(s.size(), static_cast<size_t>(capacity - 1));
    std::memcpy(out, s.data(), n);
    out[n] = '\0';
  }
  return static_cast<int>(s.size());
}
}  // namespace

extern "C" {

/// Loads a model; returns a handle, or nullptr with the reason copied into `error`.
void* omnibal_spm_load(const char* path, char* error, int error_capacity) {
  auto* sp = new Processor();
  const auto status = sp->Load(path);
  if (!status.ok()) {
    copy_out(status.ToString(), error, error_capacity);
    delete sp;
    return nullptr;
  }
  return sp;
}

void omnibal_spm_free(void* handle) { delete as_sp(handle); }

/// Encodes `length` bytes of `text`; writes up to `capacity` ids and returns how many there are
/// (call again with a larger buffer when the result exceeds `capacity`); -1 on failure.
int omnibal_spm_encode(void* handle, const char* text, int length, int* ids, int capacity) {
  std::vector<int> out;
  if (!as_sp(handle)->Encode(std::string(text, length), &out).ok()) return -1;
  for (int i = 0; i < static_cast<int>(out.size()) && i < capacity; ++i) ids[i] = out[i];
  return static_cast<int>(out.size());
}

/// Decodes ids into `out` (NUL-terminated, truncated to capacity); returns the full length.
int omnibal_spm_decode(void* handle, const int* ids, int n, char* out, int capacity) {
  std::string text;
  if (!as_sp(handle)->Decode(std::vector<int>(ids, ids + n), &text).ok()) return -1;
  return copy_out(text, out, capacity);
}

int omnibal_spm_piece_to_id(void* handle, const char* piece) {
  return as_sp(handle)->PieceToId(piece);
}

int omnibal_spm_id_to_piece(void* handle, int id, char* out, int capacity) {
  return copy_out(as_sp(handle)->IdToPiece(id), out, capacity);
}

/// 0: piece count, 1: bos id, 2: eos id, 3: unk id, 4: pad id.
int omnibal_spm_info(void* handle, int what) {
  const Processor* sp = as_sp(handle);
  switch (what) {
    case 0: return sp->GetPieceSize();
    case 1: return sp->bos_id();
    case 2: return sp->eos_id();
    case 3: return sp->unk_id();
    case 4: return sp->pad_id();
    default: return -1;
  }
}

}  // extern "C"
