// Message headers without MPI: the wire form round-trips, expectations with -1 match any size,
// and mismatches are described so both sides show up in the error.
#include "comm/tensor_message.h"

#include <catch2/catch.hpp>

using namespace omnibal::comm;
using Catch::Matchers::Contains;

namespace {
MessageHeader header(MessageKind kind, int mb, std::vector<TensorMeta> tensors) {
  MessageHeader h;
  h.kind = kind;
  h.micro_batch = mb;
  h.tensors = std::move(tensors);
  return h;
}
}  // namespace

TEST_CASE("message header: wire form round-trips", "[comm][message]") {
  const auto h = header(MessageKind::kGradient, 7,
                        {{at::kFloat, {128, 64}},
                         {at::kInt, {5}},
                         {at::kLong, {}},
                         {at::kBFloat16, {1, 2, 3, 4, 5, 6}}});
  const torch::Tensor words = h.encode();
  CHECK(words.numel() == MessageHeader::kHeaderWords);
  const MessageHeader back = MessageHeader::decode(words);
  CHECK(back.kind == MessageKind::kGradient);
  CHECK(back.micro_batch == 7);
  REQUIRE(back.tensors.size() == 4);
  for (size_t i = 0; i < 4; ++i) CHECK(back.tensors[i] == h.tensors[i]);
  CHECK(back.describe() ==
        "gradient mb 7 [float32 [128, 64], int32 [5], int64 [], bfloat16 [1, 2, 3, 4, 5, 6]]");
}

TEST_CASE("message header: expectations match by kind, mb, dtype, ndim and fixed dims",
          "[comm][message]") {
  const auto got = header(MessageKind::kActivation, 3, {{at::kFloat, {37, 64}}});
  CHECK(got.matches(header(MessageKind::kActivation, 3, {{at::kFloat, {-1, 64}}})));
  CHECK(got.matches(header(MessageKind::kActivation, 3, {{at::kFloat, {37, 64}}})));
  CHECK_FALSE(got.matches(header(MessageKind::kActivation, 3, {{at::kFloat, {-1, 32}}})));
  CHECK_FALSE(got.matches(header(MessageKind::kActivation, 4, {{at::kFloat, {-1, 64}}})));
  CHECK_FALSE(got.matches(header(MessageKind::kGradient, 3, {{at::kFloat, {-1, 64}}})));
  CHECK_FALSE(got.matches(header(MessageKind::kActivation, 3, {{at::kDouble, {-1, 64}}})));
  CHECK_FALSE(got.matches(header(MessageKind::kActivation, 3, {{at::kFloat, {-1, 64, 1}}})));
  CHECK_FALSE(
      got.matches(header(MessageKind::kActivation, 3, {{at::kFloat, {-1, 64}}, {at::kInt, {-1}}})));
}

TEST_CASE("message header: limits and bad wire data are errors", "[comm][message]") {
  std::vector<TensorMeta> nine(9, TensorMeta{at::kFloat, {1}});
  CHECK_THROWS_WITH(header(MessageKind::kSide, 0, nine).encode(),
                    Contains("at most 8 tensors per message, got 9"));
  CHECK_THROWS_WITH(header(MessageKind::kSide, 0, {{at::kFloat, {1, 1, 1, 1, 1, 1, 1}}}).encode(),
                    Contains("has 7 dims, at most 6"));
  CHECK_THROWS_WITH(header(MessageKind::kSide, 0, {{at::kFloat, {-1, 4}}}).encode(),
                    Contains("a sent shape must be concrete"));
  auto words = header(MessageKind::kSide, 0, {}).encode();
  words[0] = 42;
  CHECK_THROWS_WITH(MessageHeader::decode(words), Contains("bad magic number 42"));
  CHECK_THROWS_WITH(MessageHeader::decode(torch::zeros({3}, torch::kInt64)),
                    Contains("expected int64 [68]"));
}

TEST_CASE("tensor message: header of the tensors it carries", "[comm][message]") {
  TensorMessage m;
  m.kind = MessageKind::kActivation;
  m.micro_batch = 2;
  m.tensors = {torch::zeros({3, 4}), torch::zeros({7}, torch::kInt)};
  CHECK(m.header().describe() == "activation mb 2 [float32 [3, 4], int32 [7]]");
  // Tags: one header stream per kind; payload tags differ per kind and micro-batch.
  CHECK(TensorMessenger::header_tag(MessageKind::kActivation) !=
        TensorMessenger::header_tag(MessageKind::kGradient));
  CHECK(TensorMessenger::payload_tag(MessageKind::kActivation, 1) !=
        TensorMessenger::payload_tag(MessageKind::kActivation, 2));
  CHECK(TensorMessenger::payload_tag(MessageKind::kSide, 1023) <= 32767);
}
