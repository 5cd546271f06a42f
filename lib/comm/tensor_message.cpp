#include "comm/tensor_message.h"

#include "core/error.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace omnibal::comm {
namespace {
constexpr int64_t kMagic = 0x4F4D4E4942414C31;  // "OMNIBAL1"

std::string describe_meta(const TensorMeta& m) {
  return fmt::format("{} [{}]", dtype_name(m.dtype), fmt::join(m.shape, ", "));
}
}  // namespace

std::string kind_name(MessageKind kind) {
  switch (kind) {
    case MessageKind::kActivation: return "activation";
    case MessageKind::kGradient: return "gradient";
    case MessageKind::kSide: return "side";
  }
  return fmt::format("kind {}", static_cast<int>(kind));
}

TensorMeta TensorMeta::of(const torch::Tensor& t) {
  return TensorMeta{t.scalar_type(), t.sizes().vec()};
}

std::string MessageHeader::describe() const {
  std::vector<std::string> parts;
  for (const auto& m : tensors) parts.push_back(describe_meta(m));
  const std::string chunk_text = chunk ? fmt::format(" chunk {}", chunk) : std::string();
  return fmt::format("{} mb {}{} [{}]", kind_name(kind), micro_batch, chunk_text,
                     fmt::join(parts, ", "));
}

bool MessageHeader::matches(const MessageHeader& expected) const {
  if (kind != expected.kind || micro_batch != expected.micro_batch || chunk != expected.chunk)
    return false;
  if (tensors.size() != expected.tensors.size()) return false;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& got = tensors[i];
    const auto& want = expected.tensors[i];
    if (got.dtype != want.dtype || got.shape.size() != want.shape.size()) return false;
    for (size_t d = 0; d < got.shape.size(); ++d) {
      if (want.shape[d] != -1 && want.shape[d] != got.shape[d]) return false;
    }
  }
  return true;
}

torch::Tensor MessageHeader::encode() const {
  OMNIBAL_CHECK(static_cast<int>(tensors.size()) <= kMaxTensors, "message ", describe(),
                ": at most ", kMaxTensors, " tensors per message, got ", tensors.size());
  auto words = torch::zeros({kHeaderWords}, torch::kInt64);
  auto* w = words.data_ptr<int64_t>();
  w[0] = kMagic;
  w[1] = static_cast<int64_t>(kind) + 256 * int64_t{chunk};
  w[2] = micro_batch;
  w[3] = static_cast<int64_t>(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& m = tensors[i];
    OMNIBAL_CHECK(static_cast<int>(m.shape.size()) <= kMaxDims, "message ", describe(), ": tensor ",
                  i, " has ", m.shape.size(), " dims, at most ", kMaxDims);
    int64_t* slot = w + 4 + i * (2 + kMaxDims);
    slot[0] = static_cast<int64_t>(m.dtype);
    slot[1] = static_cast<int64_t>(m.shape.size());
    for (size_t d = 0; d < m.shape.size(); ++d) {
      OMNIBAL_CHECK(m.shape[d] >= 0, "message ", describe(), ": tensor ", i, " dim ", d, " is ",
                    m.shape[d], "; a sent shape must be concrete");
      slot[2 + d] = m.shape[d];
    }
  }
  return words;
}

MessageHeader MessageHeader::decode(const torch::Tensor& words) {
  OMNIBAL_CHECK(words.scalar_type() == at::kLong && words.numel() == kHeaderWords,
                "message header: expected int64 [", kHeaderWords, "], got ",
                describe_tensor(words));
  const auto* w = words.data_ptr<int64_t>();
  OMNIBAL_CHECK(w[0] == kMagic, "message header: bad magic number ", w[0],
                " (the peer sent something that is not an omnibal tensor message)");
  OMNIBAL_CHECK(w[3] >= 0 && w[3] <= kMaxTensors, "message header: bad tensor count ", w[3]);
  MessageHeader h;
  h.kind = static_cast<MessageKind>(w[1] % 256);
  h.chunk = static_cast<int>(w[1] / 256);
  h.micro_batch = static_cast<int>(w[2]);
  for (int64_t i = 0; i < w[3]; ++i) {
    const int64_t* slot = w + 4 + i * (2 + kMaxDims);
    OMNIBAL_CHECK(slot[1] >= 0 && slot[1] <= kMaxDims, "message header: tensor ", i,
                  " has a bad ndim ", slot[1]);
    TensorMeta m;
    m.dtype = static_cast<at::ScalarType>(slot[0]);
    m.shape.assign(slot + 2, slot + 2 + slot[1]);
    h.tensors.push_back(std::move(m));
  }
  return h;
}

MessageHeader TensorMessage::header() const {
  MessageHeader h;
  h.kind = kind;
  h.micro_batch = micro_batch;
  h.chunk = chunk;
  for (const auto& t : tensors) h.tensors.push_back(TensorMeta::of(t));
  return h;
}

PendingMessage::PendingMessage(Communicator* comm, MessageHeader expected, int peer,
                               torch::Device device)
    : comm_(comm), expected_(std::move(expected)), peer_(peer), device_(device) {
  what_ = fmt::format("recv {} mb {} from rank {}", kind_name(expected_.kind),
                      expected_.micro_batch, comm_->world_rank(peer_));
  header_words_ = torch::empty({MessageHeader::kHeaderWords}, torch::kInt64);
  header_request_ = comm_->irecv(header_words_, peer_, TensorMessenger::header_tag(expected_.kind),
                                 what_ + " (header)");
}

void PendingMessage::check_header() {
  const MessageHeader got = MessageHeader::decode(header_words_);
  OMNIBAL_CHECK(got.matches(expected_), what_, ": expected ", expected_.describe(), ", got ",
                got.describe(), " (sender and receiver disagree on the schedule or the shapes)");
  for (const auto& m : got.tensors) {
    tensors_.push_back(
        torch::empty(m.shape, torch::TensorOptions().dtype(m.dtype).device(device_)));
  }
  header_checked_ = true;
}

void PendingMessage::receive_header() {
  OMNIBAL_CHECK(comm_, "PendingMessage: receive on an empty handle");
  if (header_checked_) return;
  header_request_.wait();
  check_header();
}

void PendingMessage::post_payload() {
  OMNIBAL_CHECK(header_checked_, what_, ": post_payload() before the header was received");
  if (payload_started_) return;
  std::vector<Request> parts;
  const int tag = TensorMessenger::payload_tag(expected_.kind, expected_.micro_batch);
  for (size_t i = 0; i < tensors_.size(); ++i) {
    parts.push_back(
        comm_->irecv(tensors_[i], peer_, tag,
                     fmt::format("{} (tensor {}: {})", what_, i, describe_tensor(tensors_[i]))));
  }
  payload_request_ = Request::all(std::move(parts), what_);
  payload_started_ = true;
}

bool PendingMessage::test() {
  OMNIBAL_CHECK(comm_, "PendingMessage: test() on an empty receive");
  if (!header_checked_) {
    if (!header_request_.test()) return false;
    check_header();
  }
  post_payload();
  return payload_request_.test();
}

std::vector<torch::Tensor> PendingMessage::wait() {
  receive_header();
  post_payload();
  payload_request_.wait();
  return tensors_;
}

Request TensorMessenger::send_header(const TensorMessage& message, int peer) {
  const MessageHeader header = message.header();
  return comm_->isend(header.encode(), peer, header_tag(message.kind),
                      fmt::format("send {} header to rank {}", header.describe(),
                                  comm_->world_rank(peer)));
}

Request TensorMessenger::send_payload(const TensorMessage& message, int peer) {
  const std::string what =
      fmt::format("send {} to rank {}", message.header().describe(), comm_->world_rank(peer));
  std::vector<Request> parts;
  for (const auto& t : message.tensors) {
    parts.push_back(
        comm_->isend(t.contiguous(), peer, payload_tag(message.kind, message.micro_batch), what));
  }
  return Request::all(std::move(parts), what);
}

Request TensorMessenger::send(const TensorMessage& message, int peer) {
  std::vector<Request> parts;
  parts.push_back(send_header(message, peer));
  parts.push_back(send_payload(message, peer));
  std::string what = parts.back().what();
  return Request::all(std::move(parts), std::move(what));
}

PendingMessage TensorMessenger::recv(const MessageHeader& expected, int peer,
                                     torch::Device device) {
  return PendingMessage(comm_, expected, peer, device);
}

std::vector<torch::Tensor> TensorMessenger::send_recv(const TensorMessage& out, int dst,
                                                      const MessageHeader& expected, int src,
                                                      torch::Device device) {
  // Headers first (small, CPU), so both payloads can be posted in one group: NCCL deadlocks
  // when two neighbours each enqueue a send before their receive.
  PendingMessage in = recv(expected, src, device);
  Request header_sent = send_header(out, dst);
  in.receive_header();
  comm_->group_start();
  Request payload_sent = send_payload(out, dst);
  in.post_payload();
  comm_->group_end();
  auto tensors = in.wait();
  payload_sent.wait();
  header_sent.wait();
  return tensors;
}

}  // namespace omnibal::comm
