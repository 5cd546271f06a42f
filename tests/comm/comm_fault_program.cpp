// A small MPI program for the failure tests (comm_fault_test.cpp runs it under mpiexec):
//   comm_fault_program <mode> <dir> [timeout_s] [stop_grace_s]
// modes:
//   throw-in-recv       rank 1 throws while rank 0 waits in a receive
//   throw-in-allreduce  rank 1 throws while the other ranks wait in an all-reduce
//   thread-throw        a background thread of rank 1 throws; its main thread waits in a
//                       receive that never completes, rank 0 in an all-reduce
//   timeout             rank 0 waits for an activation rank 1 never sends (watchdog)
//   timeout-allreduce   rank 0 waits in an all-reduce rank 1 never joins (watchdog)
//   sigterm             steps of all-reduce + should_stop(); each rank writes <dir>/rank<r>.pid
//                       at start and <dir>/rank<r>.stop (the step) when all agree to stop
// Everything runs under run_guarded() with the stop handler installed, as omnibal-train does.
#include "comm/communicator.h"
#include "comm/error_forwarder.h"
#include "comm/job_guard.h"
#include "comm/mpi_runtime.h"
#include "comm/stop_signal.h"
#include "comm/tensor_message.h"

#include "core/error.h"

#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>

using namespace omnibal::comm;

namespace {

void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

void write_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  std::ofstream(tmp) << text << "\n";
  OMNIBAL_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "cannot write ", path);
}

MessageHeader expect_activation(int mb) {
  return MessageHeader{MessageKind::kActivation, mb, {{at::kFloat, {-1, 8}}}};
}

int run_sigterm(Communicator& world, const std::string& dir) {
  const int me = world.rank();
  write_file(dir + "/rank" + std::to_string(me) + ".pid", std::to_string(getpid()));
  for (int step = 1; step <= 2000; ++step) {
    sleep_s(0.01);  // "compute"
    auto t = torch::full({4}, 1.0);
    world.all_reduce(t);
    OMNIBAL_CHECK(t[0].item<double>() == world.size(), "all-reduce gave ", t[0].item<double>());
    if (should_stop(world)) {
      // Here the trainer writes its checkpoint; then every rank exits 0 together.
      write_file(dir + "/rank" + std::to_string(me) + ".stop", std::to_string(step));
      std::printf("rank %d stops at step %d\n", me, step);
      return 0;
    }
  }
  OMNIBAL_FAIL("no stop request arrived within 2000 steps");
}

int run_mode(const std::string& mode, const std::string& dir, double timeout_s,
             double stop_grace_s) {
  install_stop_handler();
  WaitPolicy policy;
  policy.timeout_s = timeout_s;
  policy.errors = std::make_shared<ErrorForwarder>();
  policy.stop_grace_s = stop_grace_s;
  auto world = make_mpi_communicator(MPI_COMM_WORLD, "world", std::make_shared<Watchdog>(policy));
  TensorMessenger messenger(*world);
  const int me = world->rank();
  if (mode == "sigterm") return run_sigterm(*world, dir);
  if (mode == "throw-in-recv") {
    if (me == 1) {
      sleep_s(0.5);
      OMNIBAL_FAIL("injected failure at step 2 (where=forward)");
    }
    if (me == 0) messenger.recv(expect_activation(0), 1).wait();
  } else if (mode == "throw-in-allreduce") {
    if (me == 1) {
      sleep_s(0.5);
      OMNIBAL_FAIL("injected failure at step 3 (where=reduce)");
    }
    auto t = torch::ones({16});
    world->all_reduce(t);
  } else if (mode == "thread-throw") {
    if (me == 1) {
      std::thread loader([&] {
        policy.errors->run_guarded("data-loader", [] {
          sleep_s(0.5);
          OMNIBAL_FAIL("injected loader failure: bad sample 17");
        });
      });
      loader.detach();
      messenger.recv(expect_activation(0), 0).wait();  // never sent
    } else {
      auto t = torch::ones({16});
      world->all_reduce(t);
    }
  } else if (mode == "timeout") {
    if (me == 1) sleep_s(120);
    if (me == 0) messenger.recv(expect_activation(3), 1).wait();
  } else if (mode == "timeout-allreduce") {
    if (me == 1) sleep_s(120);
    auto grads = torch::zeros({16});
    world->all_reduce(grads, ReduceOp::kSum, "gradient all-reduce of bucket 2 over world");
  } else {
    OMNIBAL_FAIL("unknown mode '", mode, "'");
  }
  OMNIBAL_FAIL("mode ", mode, " finished without the failure it injects");
}

}  // namespace

int main(int argc, char** argv) {
  MpiRuntime mpi(&argc, &argv);
  return run_guarded([&] {
    OMNIBAL_CHECK(argc >= 3, "usage: comm_fault_program <mode> <dir> [timeout_s] [stop_grace_s]");
    const double timeout_s = argc >= 4 ? std::stod(argv[3]) : 30.0;
    const double stop_grace_s = argc >= 5 ? std::stod(argv[4]) : 20.0;
    return run_mode(argv[1], argv[2], timeout_s, stop_grace_s);
  });
}
