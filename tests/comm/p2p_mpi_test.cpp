// Point-to-point tensor messages at 2 ranks (registered as `mpiexec -n 2`): micro-batches of
// differing shapes with side tensors, >= 8 MiB activations and gradients sent by both
// neighbours at once (the 1F1B steady state), and header mismatches.
#include "comm/tensor_message.h"
#include "mpi_test_support.h"

#include <catch2/catch.hpp>

using namespace omnibal::comm;
using Catch::Matchers::Contains;
using omnibal::comm::testing::pattern;
using omnibal::comm::testing::world_comm;

namespace {
const std::vector<int64_t> kLengths = {5, 17, 1, 33, 0};  // tokens per micro-batch
constexpr int64_t kHidden = 16;

TensorMessage activation(int mb) {
  // Hidden states [tokens, hidden] plus cu_seqlens int32 [samples + 1] as a side tensor.
  TensorMessage m{MessageKind::kActivation, mb, {}};
  m.tensors.push_back(pattern({kLengths[mb], kHidden}, mb));
  m.tensors.push_back(torch::tensor({0, static_cast<int>(kLengths[mb])}, torch::kInt));
  return m;
}
}  // namespace

TEST_CASE("p2p: micro-batches of differing shapes with side tensors", "[p2p]") {
  auto comm = world_comm();
  REQUIRE(comm->size() == 2);
  TensorMessenger messenger(*comm);
  const int n_mb = static_cast<int>(kLengths.size());
  if (comm->rank() == 0) {
    // Stage 0: all forwards, then receive the gradients in order.
    std::vector<Request> sent;
    for (int mb = 0; mb < n_mb; ++mb) sent.push_back(messenger.send(activation(mb), 1));
    for (int mb = 0; mb < n_mb; ++mb) {
      MessageHeader expect{MessageKind::kGradient, mb, {{at::kFloat, {-1, kHidden}}}};
      auto got = messenger.recv(expect, 1).wait();
      REQUIRE(got.size() == 1);
      CHECK(got[0].sizes().vec() == std::vector<int64_t>{kLengths[mb], kHidden});
      CHECK(torch::equal(got[0], -pattern({kLengths[mb], kHidden}, mb)));
    }
    wait_all(sent);
  } else {
    for (int mb = 0; mb < n_mb; ++mb) {
      MessageHeader expect{MessageKind::kActivation,
                           mb,
                           {{at::kFloat, {-1, kHidden}}, {at::kInt, {2}}}};
      auto got = messenger.recv(expect, 0).wait();
      REQUIRE(got.size() == 2);
      CHECK(torch::equal(got[0], pattern({kLengths[mb], kHidden}, mb)));
      CHECK(got[1][1].item<int>() == kLengths[mb]);
      messenger.send({MessageKind::kGradient, mb, {-got[0]}}, 0).wait();
    }
  }
}

TEST_CASE("p2p: >= 8 MiB in both directions at once", "[p2p]") {
  auto comm = world_comm();
  TensorMessenger messenger(*comm);
  const int me = comm->rank(), peer = 1 - me;
  // 2.5 M float32 = 10 MiB (above any eager limit): rank 0 sends an activation, rank 1 a
  // gradient, both posting their send before their receive as in 1F1B's steady state.
  const std::vector<int64_t> shape = {2500, 1000};
  const MessageKind out_kind = me == 0 ? MessageKind::kActivation : MessageKind::kGradient;
  const MessageKind in_kind = me == 0 ? MessageKind::kGradient : MessageKind::kActivation;
  for (int mb = 0; mb < 3; ++mb) {
    const int64_t rows = shape[0] + mb;  // shapes differ per micro-batch
    Request sent = messenger.send({out_kind, mb, {pattern({rows, shape[1]}, 10 * me + mb)}}, peer);
    auto got = messenger.recv({in_kind, mb, {{at::kFloat, {-1, shape[1]}}}}, peer).wait();
    sent.wait();
    REQUIRE(got[0].nbytes() >= (8u << 20));
    CHECK(torch::equal(got[0], pattern({rows, shape[1]}, 10 * peer + mb)));
  }
  // The same through send_recv (one grouped exchange, as the NCCL backend needs).
  auto got = messenger.send_recv({out_kind, 7, {pattern(shape, 5 + me)}}, peer,
                                 {in_kind, 7, {{at::kFloat, shape}}}, peer);
  CHECK(torch::equal(got[0], pattern(shape, 5 + peer)));
  // And raw tensors of 9 MiB through the communicator.
  auto out = pattern({9 << 18}, me);
  auto in = torch::empty({9 << 18});
  Request s = comm->isend(out, peer, 7, "raw send");
  Request r = comm->irecv(in, peer, 7, "raw recv");
  r.wait();
  s.wait();
  CHECK(torch::equal(in, pattern({9 << 18}, peer)));
}

TEST_CASE("p2p: a header mismatch is a loud error naming both sides", "[p2p]") {
  auto comm = world_comm();
  TensorMessenger messenger(*comm);
  if (comm->rank() == 0) {
    messenger.send({MessageKind::kActivation, 2, {torch::zeros({4, 8})}}, 1).wait();
    messenger.send({MessageKind::kGradient, 3, {torch::zeros({4, 8})}}, 1).wait();
  } else {
    CHECK_THROWS_WITH(
        messenger.recv({MessageKind::kActivation, 2, {{at::kFloat, {-1, 16}}}}, 0).wait(),
        Contains("recv activation mb 2 from rank 0: expected activation mb 2 [float32 [-1, 16]], "
                 "got activation mb 2 [float32 [4, 8]]"));
    CHECK_THROWS_WITH(
        messenger.recv({MessageKind::kGradient, 4, {{at::kFloat, {4, 8}}}}, 0).wait(),
        Contains("expected gradient mb 4 [float32 [4, 8]], got gradient mb 3 [float32 [4, 8]]"));
  }
  comm->barrier();
}

TEST_CASE("p2p: bad arguments are errors", "[p2p]") {
  auto comm = world_comm();
  const int me = comm->rank();
  CHECK_THROWS_WITH(comm->isend(torch::zeros({2}), me, 0, "send to self"),
                    Contains("send to self: peer " + std::to_string(me) + " is not another rank"));
  CHECK_THROWS_WITH(comm->isend(torch::zeros({4, 4}).t(), 1 - me, 0, "strided send"),
                    Contains("strided send: expected a contiguous tensor"));
  CHECK_THROWS_WITH(comm->isend(torch::zeros({2}), 1 - me, 40000, "big tag"),
                    Contains("tag 40000 outside [0, 32767]"));
}
