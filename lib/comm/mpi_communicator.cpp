// The MPI backend of Communicator (CPU tensors). Every operation is the non-blocking MPI call
// (MPI_Isend/Irecv, MPI_Iallreduce, MPI_Ireduce_scatter_block, MPI_Iallgather, MPI_Ibcast,
// MPI_Ibarrier) so waits can poll with MPI_Test under the watchdog. Messages larger than 1 GiB
// are split into chunks because MPI counts are int (reduce-scatter and all-gather blocks must
// stay below 2^31 elements / bytes). MPI has no bfloat16: it travels as 16-bit words and is
// summed by a user-defined operation (each partial sum in fp32, rounded to nearest even, as
// NCCL's bf16 reduction does per step).
#include "comm/communicator.h"
#include "comm/mpi_check.h"

#include "core/error.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <c10/util/BFloat16.h>

#include <climits>

namespace omnibal::comm {
namespace {

constexpr int64_t kChunkBytes = int64_t{1} << 30;

/// inout[i] = bf16(float(in[i]) + float(inout[i])), the MPI_Op of bfloat16 sums.
void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const c10::BFloat16*>(in);
  auto* b = static_cast<c10::BFloat16*>(inout);
  for (int i = 0; i < *len; ++i)
    b[i] = c10::BFloat16(static_cast<float>(a[i]) + static_cast<float>(b[i]));
}

/// The bfloat16 sum operation, created once (after MPI_Init; freed by MPI_Finalize).
MPI_Op bf16_sum_op() {
  static const MPI_Op op = [] {
    MPI_Op o;
    OMNIBAL_MPI_CHECK(MPI_Op_create(&bf16_sum, /*commute=*/1, &o));
    return o;
  }();
  return op;
}

MPI_Datatype mpi_type(at::ScalarType dtype) {
  switch (dtype) {
    case at::kBFloat16: return MPI_UINT16_T;  // reduced by bf16_sum_op() only
    case at::kFloat: return MPI_FLOAT;
    case at::kDouble: return MPI_DOUBLE;
    case at::kInt: return MPI_INT32_T;
    case at::kLong: return MPI_INT64_T;
    case at::kByte: return MPI_UINT8_T;
    case at::kChar: return MPI_INT8_T;
    case at::kShort: return MPI_INT16_T;
    default:
      OMNIBAL_FAIL("the MPI backend cannot reduce ", dtype_name(dtype),
                   " tensors; convert to float32 (or float64) before the all-reduce");
  }
}

MPI_Op mpi_op(ReduceOp op, at::ScalarType dtype) {
  if (dtype == at::kBFloat16) {
    OMNIBAL_CHECK(op == ReduceOp::kSum,
                  "the MPI backend reduces bfloat16 tensors by sum only; convert to float32");
    return bf16_sum_op();
  }
  switch (op) {
    case ReduceOp::kSum: return MPI_SUM;
    case ReduceOp::kMax: return MPI_MAX;
    case ReduceOp::kMin: return MPI_MIN;
  }
  OMNIBAL_FAIL("unknown ReduceOp");
}

void check_cpu_contiguous(const torch::Tensor& t, const std::string& what) {
  OMNIBAL_CHECK(t.defined(), what, ": undefined tensor");
  OMNIBAL_CHECK(t.device().is_cpu(), what, ": the MPI backend takes CPU tensors, got a tensor on ",
                t.device().str());
  OMNIBAL_CHECK(t.is_contiguous(), what, ": expected a contiguous tensor, got ", describe_tensor(t),
                " with strides [", fmt::format("{}", fmt::join(t.strides().vec(), ", ")), "]");
}

/// Any number of MPI requests plus the tensors they read or write.
class MpiRequest : public RequestImpl {
 public:
  explicit MpiRequest(torch::Tensor keep) : keep_{std::move(keep)} {}
  explicit MpiRequest(std::vector<torch::Tensor> keep) : keep_(std::move(keep)) {}
  std::vector<MPI_Request>& handles() { return handles_; }
  bool test() override {
    if (handles_.empty()) return true;
    int flag = 0;
    OMNIBAL_MPI_CHECK(MPI_Testall(static_cast<int>(handles_.size()), handles_.data(), &flag,
                                  MPI_STATUSES_IGNORE));
    return flag != 0;
  }

 private:
  std::vector<torch::Tensor> keep_;
  std::vector<MPI_Request> handles_;
};

class MpiCommunicator : public Communicator {
 public:
  MpiCommunicator(MPI_Comm parent, std::string name, std::shared_ptr<const Watchdog> dog)
      : name_(std::move(name)), watchdog_(std::move(dog)) {
    OMNIBAL_CHECK(watchdog_, "make_mpi_communicator: a watchdog is required");
    OMNIBAL_MPI_CHECK(MPI_Comm_dup(parent, &comm_));
    OMNIBAL_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
    OMNIBAL_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
    OMNIBAL_MPI_CHECK(MPI_Comm_size(comm_, &size_));
    MPI_Group group, world;
    OMNIBAL_MPI_CHECK(MPI_Comm_group(comm_, &group));
    OMNIBAL_MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world));
    std::vector<int> mine(size_), theirs(size_);
    for (int i = 0; i < size_; ++i) mine[i] = i;
    OMNIBAL_MPI_CHECK(MPI_Group_translate_ranks(group, size_, mine.data(), world, theirs.data()));
    world_ranks_ = theirs;
    MPI_Group_free(&group);
    MPI_Group_free(&world);
  }
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int world_rank(int r) const override { return world_ranks_.at(r); }
  const std::string& name() const override { return name_; }
  std::shared_ptr<const Watchdog> watchdog() const override { return watchdog_; }

  Request isend(const torch::Tensor& tensor, int peer, int tag, std::string what) override {
    check_p2p(tensor, peer, tag, what);
    auto req = std::make_unique<MpiRequest>(tensor);
    auto* base = static_cast<char*>(tensor.data_ptr());
    for_chunks(tensor.nbytes(), [&](int64_t off, int count) {
      MPI_Request h;
      OMNIBAL_MPI_CHECK(MPI_Isend(base + off, count, MPI_BYTE, peer, tag, comm_, &h));
      req->handles().push_back(h);
    });
    return Request(std::move(req), std::move(what), watchdog_);
  }

  Request irecv(torch::Tensor tensor, int peer, int tag, std::string what) override {
    check_p2p(tensor, peer, tag, what);
    auto* base = static_cast<char*>(tensor.data_ptr());
    auto req = std::make_unique<MpiRequest>(tensor);
    for_chunks(tensor.nbytes(), [&](int64_t off, int count) {
      MPI_Request h;
      OMNIBAL_MPI_CHECK(MPI_Irecv(base + off, count, MPI_BYTE, peer, tag, comm_, &h));
      req->handles().push_back(h);
    });
    return Request(std::move(req), std::move(what), watchdog_);
  }

  Request iall_reduce(torch::Tensor tensor, ReduceOp op, std::string what) override {
    check_cpu_contiguous(tensor, what);
    const MPI_Datatype type = mpi_type(tensor.scalar_type());
    const MPI_Op mop = mpi_op(op, tensor.scalar_type());
    auto req = std::make_unique<MpiRequest>(tensor);
    const int64_t elem = tensor.element_size();
    auto* base = static_cast<char*>(tensor.data_ptr());
    for_chunks(
        tensor.nbytes(),
        [&](int64_t off, int count) {
          MPI_Request h;
          OMNIBAL_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, base + off, static_cast<int>(count / elem),
                                           type, mop, comm_, &h));
          req->handles().push_back(h);
        },
        elem);
    return Request(std::move(req), std::move(what), watchdog_);
  }

  Request ireduce_scatter(torch::Tensor input, torch::Tensor output, std::string what) override {
    check_blocks(input, output, what);
    const MPI_Datatype type = mpi_type(input.scalar_type());
    const MPI_Op mop = mpi_op(ReduceOp::kSum, input.scalar_type());
    OMNIBAL_CHECK(output.numel() < INT_MAX, what, ": a block of ", output.numel(),
                  " elements is beyond MPI's int count; use smaller buckets");
    auto req = std::make_unique<MpiRequest>(std::vector<torch::Tensor>{input, output});
    MPI_Request h;
    OMNIBAL_MPI_CHECK(MPI_Ireduce_scatter_block(input.data_ptr(), output.data_ptr(),
                                                static_cast<int>(output.numel()), type, mop, comm_,
                                                &h));
    req->handles().push_back(h);
    return Request(std::move(req), std::move(what), watchdog_);
  }

  Request iall_gather(torch::Tensor input, torch::Tensor output, std::string what) override {
    check_blocks(output, input, what);
    OMNIBAL_CHECK(input.nbytes() < static_cast<size_t>(INT_MAX), what, ": a block of ",
                  input.nbytes(), " bytes is beyond MPI's int count; use smaller buckets");
    auto req = std::make_unique<MpiRequest>(std::vector<torch::Tensor>{input, output});
    MPI_Request h;
    const int bytes = static_cast<int>(input.nbytes());
    OMNIBAL_MPI_CHECK(MPI_Iallgather(input.data_ptr(), bytes, MPI_BYTE, output.data_ptr(), bytes,
                                     MPI_BYTE, comm_, &h));
    req->handles().push_back(h);
    return Request(std::move(req), std::move(what), watchdog_);
  }

  Request ibroadcast(torch::Tensor tensor, int root, std::string what) override {
    check_cpu_contiguous(tensor, what);
    OMNIBAL_CHECK(root >= 0 && root < size_, what, ": root ", root, " outside group of ", size_);
    auto req = std::make_unique<MpiRequest>(tensor);
    auto* base = static_cast<char*>(tensor.data_ptr());
    for_chunks(tensor.nbytes(), [&](int64_t off, int count) {
      MPI_Request h;
      OMNIBAL_MPI_CHECK(MPI_Ibcast(base + off, count, MPI_BYTE, root, comm_, &h));
      req->handles().push_back(h);
    });
    return Request(std::move(req), std::move(what), watchdog_);
  }

  Request ibarrier(std::string what) override {
    auto req = std::make_unique<MpiRequest>(torch::Tensor());
    MPI_Request h;
    OMNIBAL_MPI_CHECK(MPI_Ibarrier(comm_, &h));
    req->handles().push_back(h);
    return Request(std::move(req), std::move(what), watchdog_);
  }

 private:
  /// `full` [size * n] and `block` [n]: CPU, contiguous, same dtype.
  void check_blocks(const torch::Tensor& full, const torch::Tensor& block,
                    const std::string& what) const {
    check_cpu_contiguous(full, what);
    check_cpu_contiguous(block, what);
    OMNIBAL_CHECK(full.scalar_type() == block.scalar_type() &&
                      full.numel() == block.numel() * size_,
                  what, ": expected a [", size_, " x n] tensor and an [n] block of one dtype, got ",
                  describe_tensor(full), " and ", describe_tensor(block));
  }

  void check_p2p(const torch::Tensor& t, int peer, int tag, const std::string& what) const {
    check_cpu_contiguous(t, what);
    OMNIBAL_CHECK(peer >= 0 && peer < size_ && peer != rank_, what, ": peer ", peer,
                  " is not another rank of ", name_, " (size ", size_, ", this rank ", rank_, ")");
    OMNIBAL_CHECK(tag >= 0 && tag <= 32767, what, ": tag ", tag, " outside [0, 32767]");
  }

  /// Calls fn(offset, count) for consecutive chunks of at most 1 GiB (a multiple of `align`).
  template <class Fn> static void for_chunks(int64_t nbytes, Fn&& fn, int64_t align = 1) {
    const int64_t chunk = kChunkBytes / align * align;
    if (nbytes == 0) {
      fn(0, 0);
      return;
    }
    for (int64_t off = 0; off < nbytes; off += chunk) {
      fn(off, static_cast<int>(std::min(chunk, nbytes - off)));
    }
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  std::vector<int> world_ranks_;
  std::string name_;
  std::shared_ptr<const Watchdog> watchdog_;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm, std::string name,
                                                    std::shared_ptr<const Watchdog> watchdog) {
  return std::make_unique<MpiCommunicator>(comm, std::move(name), std::move(watchdog));
}

}  // namespace omnibal::comm
