// The NCCL backend of Communicator (CUDA tensors), built only when CMake sets OMNIBAL_HAVE_NCCL.
// The ncclUniqueId is created by group rank 0 and broadcast over MPI; ncclCommInitRank then
// builds the communicator on `device`. Operations are enqueued on the current CUDA stream of
// LibTorch (so they order with compute and the caching allocator needs no record_stream); a
// CUDA event recorded after each operation is what Request::test() polls, together with
// ncclCommGetAsyncError, so the watchdog also covers NCCL, and ncclCommAbort runs on timeout
// (after which the communicator refuses every call and its handle is never destroyed twice).
// Reduce-scatter (sum) and all-gather are NCCL's own (ZeRO-1); bfloat16 is NCCL's ncclBfloat16
// (summed in fp32 and rounded per step, as the MPI backend's user-defined operation does).
// Inside group_start()/group_end() kernels are launched only at ncclGroupEnd, so the events of
// the grouped operations are recorded there. CPU tensors (message headers, flags) go to an MPI
// twin communicator over the same ranks.
#include "comm/communicator.h"

#include "core/error.h"

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_bf16.h>  // NCCL 2.10-2.18 define ncclBfloat16 only after it
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <nccl.h>

#include <cstring>

namespace omnibal::comm {
namespace {

#define OMNIBAL_NCCL_CHECK(call)                                                       \
  do {                                                                                 \
    ncclResult_t r_ = (call);                                                          \
    OMNIBAL_CHECK(r_ == ncclSuccess, #call, " failed: ", ncclGetErrorString(r_), " (", \
                  static_cast<int>(r_), ")");                                          \
  } while (0)
#define OMNIBAL_CUDA_CHECK(call)                                                       \
  do {                                                                                 \
    cudaError_t e_ = (call);                                                           \
    OMNIBAL_CHECK(e_ == cudaSuccess, #call, " failed: ", cudaGetErrorString(e_), " (", \
                  static_cast<int>(e_), ")");                                          \
  } while (0)

ncclDataType_t nccl_type(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat: return ncclFloat32;
    case at::kDouble: return ncclFloat64;
    case at::kHalf: return ncclFloat16;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 10, 0)
    case at::kBFloat16: return ncclBfloat16;
#endif
    case at::kInt: return ncclInt32;
    case at::kLong: return ncclInt64;
    case at::kByte: return ncclUint8;
    case at::kChar: return ncclInt8;
    default: OMNIBAL_FAIL("the NCCL backend cannot reduce ", dtype_name(dtype), " tensors");
  }
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kMin: return ncclMin;
  }
  OMNIBAL_FAIL("unknown ReduceOp");
}

/// The NCCL communicator handle, shared by the communicator and its requests. A timeout aborts
/// it (ncclCommAbort frees it); after that it is neither used nor destroyed again.
struct NcclHandle {
  ncclComm_t comm = nullptr;
  bool aborted = false;
  ~NcclHandle() {
    if (comm && !aborted) ncclCommDestroy(comm);
  }
  void abort() {
    if (!comm || aborted) return;
    aborted = true;
    ncclCommAbort(comm);
  }
};

/// Completion of one enqueued NCCL operation: a CUDA event (recorded now, or at group_end).
struct NcclEvent {
  cudaEvent_t event = nullptr;
  bool recorded = false;
  ~NcclEvent() {
    if (event) cudaEventDestroy(event);
  }
};

class NcclRequest : public RequestImpl {
 public:
  NcclRequest(std::shared_ptr<NcclHandle> handle, std::shared_ptr<NcclEvent> event,
              std::vector<torch::Tensor> keep)
      : handle_(std::move(handle)), event_(std::move(event)), keep_(std::move(keep)) {}
  bool test() override {
    OMNIBAL_CHECK(!handle_->aborted, "the NCCL communicator was aborted after a timeout");
    ncclResult_t async = ncclSuccess;
    OMNIBAL_NCCL_CHECK(ncclCommGetAsyncError(handle_->comm, &async));
    OMNIBAL_CHECK(async == ncclSuccess, "NCCL asynchronous error: ", ncclGetErrorString(async));
    if (!event_->recorded) return false;
    const cudaError_t state = cudaEventQuery(event_->event);
    if (state == cudaErrorNotReady) return false;
    OMNIBAL_CUDA_CHECK(state);
    return true;
  }
  void on_timeout() override { handle_->abort(); }

 private:
  std::shared_ptr<NcclHandle> handle_;
  std::shared_ptr<NcclEvent> event_;
  std::vector<torch::Tensor> keep_;
};

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(MPI_Comm parent, std::string name, std::shared_ptr<const Watchdog> dog,
                   int device)
      : name_(std::move(name)),
        watchdog_(std::move(dog)),
        device_(device),
        cpu_(make_mpi_communicator(parent, name_ + " (cpu)", watchdog_)) {
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
    ncclUniqueId id;
    if (cpu_->rank() == 0) OMNIBAL_NCCL_CHECK(ncclGetUniqueId(&id));
    auto id_bytes = torch::empty({static_cast<int64_t>(sizeof(id))}, torch::kUInt8);
    std::memcpy(id_bytes.data_ptr(), &id, sizeof(id));
    cpu_->broadcast(id_bytes, 0, "broadcast of the NCCL unique id over " + name_);
    std::memcpy(&id, id_bytes.data_ptr(), sizeof(id));
    OMNIBAL_NCCL_CHECK(ncclCommInitRank(&handle_->comm, cpu_->size(), id, cpu_->rank()));
  }

  int rank() const override { return cpu_->rank(); }
  int size() const override { return cpu_->size(); }
  int world_rank(int r) const override { return cpu_->world_rank(r); }
  const std::string& name() const override { return name_; }
  std::shared_ptr<const Watchdog> watchdog() const override { return watchdog_; }

  Request isend(const torch::Tensor& t, int peer, int tag, std::string what) override {
    if (on_cpu(t, what)) return cpu_->isend(t, peer, tag, std::move(what));
    check_p2p(t, peer, tag, what);
    return enqueue(t, std::move(what), [&](cudaStream_t s) {
      OMNIBAL_NCCL_CHECK(ncclSend(t.data_ptr(), t.nbytes(), ncclUint8, peer, comm(), s));
    });
  }
  Request irecv(torch::Tensor t, int peer, int tag, std::string what) override {
    if (on_cpu(t, what)) return cpu_->irecv(std::move(t), peer, tag, std::move(what));
    check_p2p(t, peer, tag, what);
    return enqueue(t, std::move(what), [&](cudaStream_t s) {
      OMNIBAL_NCCL_CHECK(ncclRecv(t.data_ptr(), t.nbytes(), ncclUint8, peer, comm(), s));
    });
  }
  Request iall_reduce(torch::Tensor t, ReduceOp op, std::string what) override {
    if (on_cpu(t, what)) return cpu_->iall_reduce(std::move(t), op, std::move(what));
    check_cuda(t, what);
    const ncclDataType_t type = nccl_type(t.scalar_type());
    return enqueue(t, std::move(what), [&](cudaStream_t s) {
      OMNIBAL_NCCL_CHECK(
          ncclAllReduce(t.data_ptr(), t.data_ptr(), t.numel(), type, nccl_op(op), comm(), s));
    });
  }
  Request ireduce_scatter(torch::Tensor in, torch::Tensor out, std::string what) override {
    if (on_cpu(in, out, what)) return cpu_->ireduce_scatter(std::move(in), std::move(out), what);
    check_blocks(in, out, what);
    const ncclDataType_t type = nccl_type(in.scalar_type());
    return enqueue(std::vector<torch::Tensor>{in, out}, std::move(what), [&](cudaStream_t s) {
      OMNIBAL_NCCL_CHECK(
          ncclReduceScatter(in.data_ptr(), out.data_ptr(), out.numel(), type, ncclSum, comm(), s));
    });
  }
  Request iall_gather(torch::Tensor in, torch::Tensor out, std::string what) override {
    if (on_cpu(in, out, what)) return cpu_->iall_gather(std::move(in), std::move(out), what);
    check_blocks(out, in, what);
    return enqueue(std::vector<torch::Tensor>{in, out}, std::move(what), [&](cudaStream_t s) {
      OMNIBAL_NCCL_CHECK(
          ncclAllGather(in.data_ptr(), out.data_ptr(), in.nbytes(), ncclUint8, comm(), s));
    });
  }
  Request ibroadcast(torch::Tensor t, int root, std::string what) override {
    if (on_cpu(t, what)) return cpu_->ibroadcast(std::move(t), root, std::move(what));
    check_cuda(t, what);
    OMNIBAL_CHECK(root >= 0 && root < size(), what, ": root ", root, " outside ", name_,
                  " of size ", size());
    return enqueue(t, std::move(what), [&](cudaStream_t s) {
      OMNIBAL_NCCL_CHECK(ncclBcast(t.data_ptr(), t.nbytes(), ncclUint8, root, comm(), s));
    });
  }
  Request ibarrier(std::string what) override { return cpu_->ibarrier(std::move(what)); }

  void group_start() override {
    OMNIBAL_CHECK(!in_group_, name_, ": nested group_start()");
    OMNIBAL_NCCL_CHECK(ncclGroupStart());
    in_group_ = true;
  }
  void group_end() override {
    OMNIBAL_CHECK(in_group_, name_, ": group_end() without group_start()");
    in_group_ = false;
    OMNIBAL_NCCL_CHECK(ncclGroupEnd());
    for (auto& e : grouped_) record(*e);
    grouped_.clear();
  }

 private:
  /// The live NCCL handle; throws once a timeout aborted it.
  ncclComm_t comm() const {
    OMNIBAL_CHECK(!handle_->aborted, name_, ": the NCCL communicator was aborted after a timeout");
    return handle_->comm;
  }
  /// Whether `t` goes to the MPI twin (a CPU tensor); throws on an undefined tensor.
  static bool on_cpu(const torch::Tensor& t, const std::string& what) {
    OMNIBAL_CHECK(t.defined(), what, ": undefined tensor");
    return t.device().is_cpu();
  }
  /// Both on the CPU (the MPI twin) or both on the GPU; throws when they are on different sides.
  bool on_cpu(const torch::Tensor& a, const torch::Tensor& b, const std::string& what) const {
    const bool cpu = on_cpu(a, what);
    OMNIBAL_CHECK(cpu == on_cpu(b, what), what,
                  ": expected both tensors on the CPU or both on cuda:", device_, ", got ",
                  a.device().str(), " and ", b.device().str());
    return cpu;
  }
  /// `full` [size * n] and `block` [n]: on this device, contiguous, same dtype.
  void check_blocks(const torch::Tensor& full, const torch::Tensor& block,
                    const std::string& what) const {
    check_cuda(full, what);
    check_cuda(block, what);
    OMNIBAL_CHECK(full.scalar_type() == block.scalar_type() &&
                      full.numel() == block.numel() * size(),
                  what, ": expected a [", size(),
                  " x n] tensor and an [n] block of one dtype, got ", describe_tensor(full),
                  " and ", describe_tensor(block));
  }
  void check_cuda(const torch::Tensor& t, const std::string& what) const {
    OMNIBAL_CHECK(t.is_cuda() && t.device().index() == device_, what,
                  ": expected a tensor on cuda:", device_, ", got one on ", t.device().str());
    OMNIBAL_CHECK(t.is_contiguous(), what, ": expected a contiguous tensor, got ",
                  describe_tensor(t));
  }
  void check_p2p(const torch::Tensor& t, int peer, int tag, const std::string& what) const {
    check_cuda(t, what);
    OMNIBAL_CHECK(peer >= 0 && peer < size() && peer != rank(), what, ": peer ", peer,
                  " is not another rank of ", name_, " (size ", size(), ", this rank ", rank(),
                  ")");
    OMNIBAL_CHECK(tag >= 0 && tag <= 32767, what, ": tag ", tag, " outside [0, 32767]");
  }
  void record(NcclEvent& e) const {
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device_).stream();
    OMNIBAL_CUDA_CHECK(cudaEventRecord(e.event, stream));
    e.recorded = true;
  }
  template <class Fn> Request enqueue(const torch::Tensor& t, std::string what, Fn&& launch) {
    return enqueue(std::vector<torch::Tensor>{t}, std::move(what), std::forward<Fn>(launch));
  }
  template <class Fn>
  Request enqueue(std::vector<torch::Tensor> keep, std::string what, Fn&& launch) {
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
    auto event = std::make_shared<NcclEvent>();
    OMNIBAL_CUDA_CHECK(cudaEventCreateWithFlags(&event->event, cudaEventDisableTiming));
    launch(c10::cuda::getCurrentCUDAStream(device_).stream());
    if (in_group_) grouped_.push_back(event);
    else record(*event);
    return Request(std::make_unique<NcclRequest>(handle_, event, std::move(keep)), std::move(what),
                   watchdog_);
  }

  std::string name_;
  std::shared_ptr<const Watchdog> watchdog_;
  int device_;
  std::unique_ptr<Communicator> cpu_;
  std::shared_ptr<NcclHandle> handle_ = std::make_shared<NcclHandle>();
  bool in_group_ = false;
  std::vector<std::shared_ptr<NcclEvent>> grouped_;
};

}  // namespace

bool nccl_available() { return true; }

std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm comm, std::string name,
                                                     std::shared_ptr<const Watchdog> watchdog,
                                                     int device) {
  return std::make_unique<NcclCommunicator>(comm, std::move(name), std::move(watchdog), device);
}

}  // namespace omnibal::comm
