// The communicator interface every distributed part of omnibal talks to: paired non-blocking
// point-to-point of tensors, in-place all-reduce, broadcast and barrier over one group of ranks.
// Two backends, chosen at build time and each in its own .cpp (no #ifdef here):
//   - MPI (mpi_communicator.cpp): CPU tensors; always built, so multi-rank logic runs in CI.
//   - NCCL (nccl_communicator.cpp): CUDA tensors; built when CMake sets OMNIBAL_HAVE_NCCL,
//     otherwise nccl_unavailable.cpp makes make_nccl_communicator() throw a clear error. CPU
//     tensors given to an NCCL communicator travel over its MPI twin (message headers, flags).
// Every blocking wait goes through the Watchdog (comm.timeout_s). Point-to-point carries raw
// tensors; tensor_message.h adds the shape/kind header used between pipeline stages.
#pragma once

#include "comm/watchdog.h"

#include <mpi.h>
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

namespace omnibal::comm {

/// Reduction of all_reduce.
enum class ReduceOp { kSum, kMax, kMin };

/// Backend-specific state of one non-blocking operation.
class RequestImpl {
 public:
  virtual ~RequestImpl() = default;
  /// Advances the operation; true once it completed (buffers may be reused).
  virtual bool test() = 0;
  /// Called before a timeout error is thrown (NCCL aborts its communicator here).
  virtual void on_timeout() {}
};

/// Handle of a non-blocking operation. Move-only. The tensors of the operation stay alive
/// inside the handle until it completes. Dropping an unfinished handle leaks its buffers on
/// purpose (MPI may still write them); this only happens on the way to an abort.
class Request {
 public:
  Request() = default;
  Request(std::unique_ptr<RequestImpl> impl, std::string what, std::shared_ptr<const Watchdog> dog);
  Request(Request&& other) noexcept;
  Request& operator=(Request&&) noexcept;
  ~Request();

  /// Blocks until done (polling under the watchdog). Throws omnibal::Error naming `what()` on
  /// timeout or when a background thread posted an error. A no-op on an empty handle.
  void wait();
  /// Non-blocking progress; true once completed (or empty).
  bool test();
  /// The operation in words, e.g. "send activation mb 3 to rank 1".
  const std::string& what() const { return what_; }
  /// Combines several requests into one that completes when all have.
  static Request all(std::vector<Request> parts, std::string what);

 private:
  std::unique_ptr<RequestImpl> impl_;
  std::string what_;
  std::shared_ptr<const Watchdog> watchdog_;
  bool done_ = true;
};

/// Waits for every request in order.
void wait_all(std::vector<Request>& requests);

/// One group of ranks (the world, a DP group or a pipeline). Ranks and peers are ranks within
/// this group; world_rank() translates for messages. Not thread-safe: call from one thread.
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// World rank of group rank `r` (for error messages and logs).
  virtual int world_rank(int r) const = 0;
  /// "world", "dp group of stage 1", "pipeline of dp 0"...
  virtual const std::string& name() const = 0;
  virtual std::shared_ptr<const Watchdog> watchdog() const = 0;

  /// Sends `tensor` (contiguous; CPU for MPI, CUDA or CPU for NCCL) to group rank `peer`.
  /// `tag` in [0, 32767] separates streams of messages (MPI; NCCL matches in call order).
  /// The receiver must post a receive of the same byte size. Throws on a bad argument.
  virtual Request isend(const torch::Tensor& tensor, int peer, int tag, std::string what) = 0;
  /// Receives into `tensor` (contiguous, pre-allocated with the sent size) from `peer`.
  virtual Request irecv(torch::Tensor tensor, int peer, int tag, std::string what) = 0;
  /// In-place all-reduce of a contiguous tensor over the group (float32/64, int32/64, uint8;
  /// bfloat16 for kSum).
  virtual Request iall_reduce(torch::Tensor tensor, ReduceOp op, std::string what) = 0;
  /// Reduce-scatter (sum): `input` [size() * n] and `output` [n], contiguous, same dtype
  /// (float32/64; bfloat16 too, summed in fp32 and rounded per step of the reduction); group
  /// rank r receives the sum over ranks of block r of `input`. ZeRO-1's gradient reduction.
  virtual Request ireduce_scatter(torch::Tensor input, torch::Tensor output, std::string what) = 0;
  /// All-gather: `input` [n] and `output` [size() * n], contiguous, same dtype (any); block r of
  /// `output` becomes group rank r's `input`. ZeRO-1's parameter gather.
  virtual Request iall_gather(torch::Tensor input, torch::Tensor output, std::string what) = 0;
  /// In-place broadcast of a contiguous tensor from group rank `root`.
  virtual Request ibroadcast(torch::Tensor tensor, int root, std::string what) = 0;
  /// Non-blocking barrier.
  virtual Request ibarrier(std::string what) = 0;
  /// Point-to-point calls between group_start() and group_end() are posted together (NCCL
  /// needs this when two neighbours send to each other at once; a no-op for MPI).
  virtual void group_start() {}
  virtual void group_end() {}

  /// Blocking forms (post, then wait under the watchdog).
  void all_reduce(torch::Tensor tensor, ReduceOp op = ReduceOp::kSum, std::string what = "");
  void broadcast(torch::Tensor tensor, int root, std::string what = "");
  void reduce_scatter(torch::Tensor input, torch::Tensor output, std::string what = "");
  void all_gather(torch::Tensor input, torch::Tensor output, std::string what = "");
  void barrier(std::string what = "");
  /// All-reduce of one integer (CPU); for flags and counters.
  int64_t all_reduce_int(int64_t value, ReduceOp op, std::string what = "");
};

/// Collective over `group`: whether every rank passed the same `value` (a hash of a plan, a
/// config, a table). One all-reduce of four int64 (max and negated min of both 32-bit halves).
/// The caller throws with what differs: `OMNIBAL_CHECK(same_on_every_rank(w, h, "plan hash"),
/// "the data plan differs between ranks ...")`.
bool same_on_every_rank(Communicator& group, uint64_t value, std::string what = "");

/// An MPI communicator over a duplicate of `comm` (so its messages never mix with other
/// users of `comm`). Collective over `comm`. CPU tensors only.
std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm, std::string name,
                                                    std::shared_ptr<const Watchdog> watchdog);

/// True when this build has the NCCL backend (CUDA LibTorch + NCCL found by CMake).
bool nccl_available();
/// An NCCL communicator over the ranks of `comm` on CUDA device `device` (the unique id is
/// broadcast over MPI). Collective over `comm`. Throws omnibal::Error when !nccl_available().
std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm comm, std::string name,
                                                     std::shared_ptr<const Watchdog> watchdog,
                                                     int device);

/// "float32", "bfloat16", "int64"... (the names of torch.dtype, without the prefix).
std::string dtype_name(at::ScalarType dtype);
/// "float32 [4, 128]" description of a tensor for messages.
std::string describe_tensor(const torch::Tensor& tensor);

}  // namespace omnibal::comm
