// Point-to-point cost of the communicator at 2 ranks: round-trip time of a ping-pong through
// Communicator (waits poll under the watchdog) against plain MPI_Isend/MPI_Irecv + MPI_Wait,
// and a 1F1B-style exchange where both ranks send a message with header at once. With a second
// argument `allreduce`: the all-reduce latency and bus bandwidth (the TP link of the simulator,
// scripts/bench/tp_bench.sh).
// Run by scripts/bench/comm_p2p.sh (and tp_bench.sh for the all-reduce); prints median and
// min-max over interleaved repetitions.
#include "comm/communicator.h"
#include "comm/link_probe.h"
#include "comm/mpi_runtime.h"
#include "comm/tensor_message.h"

#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

using namespace omnibal::comm;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

/// Round trips of `bytes` through the Communicator; seconds per round trip.
double pingpong_comm(Communicator& comm, int64_t bytes, int iters) {
  auto buf = torch::zeros({std::max<int64_t>(bytes, 1)}, torch::kUInt8).narrow(0, 0, bytes);
  const int me = comm.rank(), peer = 1 - me;
  comm.barrier();
  const auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) {
    if (me == 0) {
      comm.isend(buf, peer, 1, "ping").wait();
      comm.irecv(buf, peer, 2, "pong").wait();
    } else {
      comm.irecv(buf, peer, 1, "ping").wait();
      comm.isend(buf, peer, 2, "pong").wait();
    }
  }
  return seconds_since(t0) / iters;
}

/// The same with plain MPI and MPI_Wait (the baseline without watchdog polling).
double pingpong_mpi(MPI_Comm comm, int64_t bytes, int iters) {
  std::vector<char> buf(std::max<int64_t>(bytes, 1));
  int me = 0;
  MPI_Comm_rank(comm, &me);
  const int peer = 1 - me;
  MPI_Barrier(comm);
  const auto t0 = Clock::now();
  MPI_Request r;
  for (int i = 0; i < iters; ++i) {
    const int n = static_cast<int>(bytes);
    if (me == 0) {
      MPI_Isend(buf.data(), n, MPI_BYTE, peer, 1, comm, &r);
      MPI_Wait(&r, MPI_STATUS_IGNORE);
      MPI_Irecv(buf.data(), n, MPI_BYTE, peer, 2, comm, &r);
      MPI_Wait(&r, MPI_STATUS_IGNORE);
    } else {
      MPI_Irecv(buf.data(), n, MPI_BYTE, peer, 1, comm, &r);
      MPI_Wait(&r, MPI_STATUS_IGNORE);
      MPI_Isend(buf.data(), n, MPI_BYTE, peer, 2, comm, &r);
      MPI_Wait(&r, MPI_STATUS_IGNORE);
    }
  }
  return seconds_since(t0) / iters;
}

/// Both ranks send a [rows, 1024] float32 message (header + payload) and receive the other's.
double exchange(TensorMessenger& messenger, int64_t rows, int iters) {
  Communicator& comm = messenger.communicator();
  const int me = comm.rank(), peer = 1 - me;
  auto out = torch::ones({rows, 1024});
  const auto kind_out = me == 0 ? MessageKind::kActivation : MessageKind::kGradient;
  const auto kind_in = me == 0 ? MessageKind::kGradient : MessageKind::kActivation;
  comm.barrier();
  const auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) {
    Request sent = messenger.send({kind_out, i, {out}}, peer);
    messenger.recv({kind_in, i, {{at::kFloat, {-1, 1024}}}}, peer).wait();
    sent.wait();
  }
  return seconds_since(t0) / iters;
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::string summary(std::vector<double> v, double scale, const char* unit) {
  std::sort(v.begin(), v.end());
  return fmt::format("median {:.1f} {} (min {:.1f}, max {:.1f}, n={})", v[v.size() / 2] * scale,
                     unit, v.front() * scale, v.back() * scale, v.size());
}

}  // namespace

int main(int argc, char** argv) {
  MpiRuntime mpi(&argc, &argv);
  const int reps = argc > 1 ? std::atoi(argv[1]) : 5;
  WaitPolicy policy;
  auto comm = make_mpi_communicator(MPI_COMM_WORLD, "world", std::make_shared<Watchdog>(policy));
  if (argc > 2 && std::string(argv[2]) == "allreduce") {
    // The TP link as the simulator takes it (comm/link_probe.h), reps interleaved probes.
    LinkProbeOptions probe;
    probe.small_calls = 2000;
    probe.large_calls = 50;
    std::vector<double> latency, bandwidth;
    for (int r = 0; r < reps; ++r) {
      const AllReduceLink link = probe_all_reduce(*comm, torch::kFloat32, probe);
      latency.push_back(link.latency_s);
      bandwidth.push_back(link.bus_bandwidth);
    }
    if (mpi.rank() == 0) {
      std::printf("all-reduce %d ranks 8 B: %s\n", comm->size(),
                  summary(latency, 1e6, "us").c_str());
      std::printf("all-reduce %d ranks 4 MiB: bus bandwidth %s\n", comm->size(),
                  summary(bandwidth, 1e-9, "GB/s").c_str());
      std::printf("tp link: latency_us %.2f bus_gbytes_per_s %.3f\n", median_of(latency) * 1e6,
                  median_of(bandwidth) / 1e9);
    }
    return 0;
  }
  TensorMessenger messenger(*comm);
  struct Size {
    int64_t bytes;
    int iters;
  };
  for (const Size s : {Size{8, 2000}, Size{64 << 10, 500}, Size{10 << 20, 20}}) {
    std::vector<double> ours, plain;
    for (int r = 0; r < reps; ++r) {  // interleaved repetitions
      ours.push_back(pingpong_comm(*comm, s.bytes, s.iters));
      plain.push_back(pingpong_mpi(MPI_COMM_WORLD, s.bytes, s.iters));
    }
    if (mpi.rank() == 0) {
      std::printf("round trip %9lld B  communicator: %s\n", static_cast<long long>(s.bytes),
                  summary(ours, 1e6, "us").c_str());
      std::printf("round trip %9lld B  plain MPI   : %s\n", static_cast<long long>(s.bytes),
                  summary(plain, 1e6, "us").c_str());
    }
  }
  std::vector<double> ex;
  for (int r = 0; r < reps; ++r) ex.push_back(exchange(messenger, 2560, 20));  // 10 MiB each way
  if (mpi.rank() == 0) {
    std::printf("1F1B exchange 10 MiB each way at once: %s\n", summary(ex, 1e3, "ms").c_str());
  }
  return 0;
}
