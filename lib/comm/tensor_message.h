// Tensor messages between pipeline stages. Micro-batches (packs) differ in shape, so every
// activation or gradient is preceded by a small header (kind, micro-batch index, then dtype,
// ndim and shape of each tensor). The receiver checks the header against what it expects and
// fails loudly naming both ("expected activation mb 3 [float32 [-1, 64]], got gradient mb 3
// [float32 [128, 64]]"), then allocates and receives the payload. One message may carry a list
// of tensors (hidden states plus side tensors: ids, cu_seqlens, ...).
//
// Wire protocol on a Communicator: the header is a CPU int64 tensor of kHeaderWords on tag
// 1000 + kind (one ordered stream per kind, so an out-of-order micro-batch shows up as a
// mismatch rather than a hang); payload tensors follow in order on tag 2000 + 1024 * kind +
// mb % 1024. All sends are non-blocking, so both neighbours may send >= 8 MiB at once (1F1B
// steady state) without deadlock. Not included: compression, tensors above 6 dims or 8 tensors.
#pragma once

#include "comm/communicator.h"

#include <string>
#include <vector>

namespace omnibal::comm {

/// What a message carries.
enum class MessageKind : int { kActivation = 1, kGradient = 2, kSide = 3 };
/// "activation", "gradient", "side".
std::string kind_name(MessageKind kind);

/// Dtype and shape of one tensor. In an expectation a dim of -1 matches any size.
struct TensorMeta {
  at::ScalarType dtype = at::kFloat;
  std::vector<int64_t> shape;
  static TensorMeta of(const torch::Tensor& t);
  bool operator==(const TensorMeta& o) const { return dtype == o.dtype && shape == o.shape; }
};

/// The header that precedes each message.
struct MessageHeader {
  static constexpr int kMaxTensors = 8;
  static constexpr int kMaxDims = 6;
  /// int64 words on the wire: magic, kind + 256 * chunk, mb, count, then (dtype, ndim, dims[6])
  /// per tensor.
  static constexpr int kHeaderWords = 4 + kMaxTensors * (2 + kMaxDims);

  MessageKind kind = MessageKind::kActivation;
  int micro_batch = 0;  ///< index of the micro-batch within the step
  std::vector<TensorMeta> tensors;
  /// Model chunk (virtual stage) of the receiver under interleaved 1F1B; 0 otherwise.
  int chunk = 0;

  /// "activation mb 3 [float32 [128, 64], int32 [5]]" ("activation mb 3 chunk 1 [...]").
  std::string describe() const;
  /// True when kind, mb, chunk, count, dtypes and ndims are equal and every dim equals or is -1 in
  /// `expected`.
  bool matches(const MessageHeader& expected) const;
  /// Wire form, int64 [kHeaderWords] on CPU. Throws when a limit is exceeded or a dim is < 0.
  torch::Tensor encode() const;
  /// Parses the wire form; throws omnibal::Error on a bad magic number or count.
  static MessageHeader decode(const torch::Tensor& words);
};

/// A message to send: a kind, a micro-batch index and its tensors.
struct TensorMessage {
  MessageKind kind = MessageKind::kActivation;
  int micro_batch = 0;
  std::vector<torch::Tensor> tensors;
  int chunk = 0;  ///< the receiver's model chunk (MessageHeader::chunk)
  MessageHeader header() const;
};

/// A receive in flight: header first, then the payload once the header has been checked.
class PendingMessage {
 public:
  PendingMessage() = default;
  PendingMessage(Communicator* comm, MessageHeader expected, int peer, torch::Device device);
  /// Advances without blocking (posts the payload receives once the header arrived); true when
  /// the whole message is in. Throws on a header mismatch.
  bool test();
  /// Blocks under the watchdog and returns the tensors in the sender's order.
  /// Throws omnibal::Error on a mismatch ("recv activation mb 3 from rank 1: expected ...,
  /// got ...") or a timeout.
  std::vector<torch::Tensor> wait();
  const std::string& what() const { return what_; }
  /// Blocks until the header is in, checks it and allocates the payload (not yet posted).
  void receive_header();
  /// Posts the payload receives (after receive_header()).
  void post_payload();

 private:
  void check_header();
  Communicator* comm_ = nullptr;
  MessageHeader expected_;
  int peer_ = -1;
  torch::Device device_ = torch::kCPU;
  std::string what_;
  torch::Tensor header_words_;
  Request header_request_;
  std::vector<torch::Tensor> tensors_;
  Request payload_request_;
  bool header_checked_ = false;
  bool payload_started_ = false;
};

/// Sends and receives TensorMessages with the neighbours of a pipeline stage over one
/// communicator (normally the pipeline group; peers are ranks of that group).
class TensorMessenger {
 public:
  explicit TensorMessenger(Communicator& comm) : comm_(&comm) {}
  /// Posts header and payload; the request completes when all are sent. Tensors are made
  /// contiguous (a copy when they are not) and kept alive by the request.
  Request send(const TensorMessage& message, int peer);
  /// Posts the header receive; `expected` gives kind, mb, dtypes and shapes (-1 = any size).
  /// Payload tensors are allocated on `device`.
  PendingMessage recv(const MessageHeader& expected, int peer, torch::Device device = torch::kCPU);
  /// Sends `out` to `dst` and receives the message from `src` at the same time (both payloads
  /// posted in one group, which NCCL needs when two neighbours send to each other); blocks
  /// until both are done and returns the received tensors.
  std::vector<torch::Tensor> send_recv(const TensorMessage& out, int dst,
                                       const MessageHeader& expected, int src,
                                       torch::Device device = torch::kCPU);
  Communicator& communicator() { return *comm_; }
  /// The header and the payload sends of `message` separately (send() = both).
  Request send_header(const TensorMessage& message, int peer);
  Request send_payload(const TensorMessage& message, int peer);

  static int header_tag(MessageKind kind) { return 1000 + static_cast<int>(kind); }
  static int payload_tag(MessageKind kind, int mb) {
    return 2000 + 1024 * static_cast<int>(kind) + mb % 1024;
  }

 private:
  Communicator* comm_;
};

}  // namespace omnibal::comm
