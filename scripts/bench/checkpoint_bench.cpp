// Checkpoint I/O figures (scripts/bench/checkpoint_bench.sh): in-memory hash throughput of
// XXH3-64 (the manifest checksum) against zlib's crc32 (the alternative considered), and, for
// one rank saving a shard of --mib MiB of fp32 tensors: save (write + fsync + digest + manifest +
// rename), find_latest (full verification) and load_tensors + reading every byte (mmap).
// Median and min-max of --reps interleaved repetitions. Not a test.
#include "checkpoint/checkpoint_store.h"
#include "comm/mpi_runtime.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <xxhash.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <vector>

namespace ckpt = omnibal::checkpoint;
namespace comm = omnibal::comm;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string summary(std::vector<double> v, double scale, const char* unit) {
  std::sort(v.begin(), v.end());
  return fmt::format("{:.2f} {} ({:.2f}-{:.2f})", scale / v[v.size() / 2], unit, scale / v.back(),
                     scale / v.front());
}

}  // namespace

int main(int argc, char** argv) {
  comm::MpiRuntime mpi(&argc, &argv);
  CLI::App app("checkpoint I/O benchmark");
  int reps = 5, mib = 256;
  std::string dir = "/tmp/omnibal_checkpoint_bench";
  app.add_option("--reps", reps);
  app.add_option("--mib", mib);
  app.add_option("--dir", dir);
  CLI11_PARSE(app, argc, argv);

  const size_t bytes = static_cast<size_t>(mib) << 20;
  ckpt::Shard shard;
  const int64_t tensors = 16, per = static_cast<int64_t>(bytes / 4 / tensors);
  for (int64_t i = 0; i < tensors; ++i)
    shard.tensors["unit_" + std::to_string(i) + ".weight"] = torch::randn({per});
  const auto* buffer = static_cast<const Bytef*>(shard.tensors.begin()->second.data_ptr());
  const size_t hash_bytes = static_cast<size_t>(per) * 4;

  comm::WaitPolicy policy;
  auto world = comm::make_mpi_communicator(MPI_COMM_WORLD, "world",
                                           std::make_shared<comm::Watchdog>(policy));
  std::filesystem::remove_all(dir);
  ckpt::CheckpointStore store(dir, 1, *world);
  std::vector<double> xxh, crc, save, find, load;
  uint64_t sink = 0;
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    sink ^= XXH3_64bits(buffer, hash_bytes);
    xxh.push_back(seconds_since(t0));
    t0 = Clock::now();
    sink ^= crc32(0L, buffer, static_cast<uInt>(hash_bytes));
    crc.push_back(seconds_since(t0));
    t0 = Clock::now();
    store.save(r, shard, "bench: 1\n");
    save.push_back(seconds_since(t0));
    t0 = Clock::now();
    const auto latest = store.find_latest();
    find.push_back(seconds_since(t0));
    t0 = Clock::now();
    std::vector<std::string> names;
    for (const auto& [name, t] : shard.tensors) names.push_back(name);
    double total = 0;
    for (const auto& [name, t] : store.load_tensors(*latest, names))
      total += t.sum().item<double>();
    load.push_back(seconds_since(t0));
    sink ^= static_cast<uint64_t>(total);
  }
  const double gb = static_cast<double>(hash_bytes) / 1e9,
               shard_gb = static_cast<double>(bytes) / 1e9;
  fmt::print("hash of {:.0f} MiB in memory: XXH3-64 {}, zlib crc32 {}\n", hash_bytes / 1048576.0,
             summary(xxh, gb, "GB/s"), summary(crc, gb, "GB/s"));
  fmt::print(
      "checkpoint of {} MiB (1 rank, {}): save {}, find_latest (verify) {}, load + read {}\n", mib,
      dir, summary(save, shard_gb, "GB/s"), summary(find, shard_gb, "GB/s"),
      summary(load, shard_gb, "GB/s"));
  fmt::print("(sink {})\n", sink & 1);
  std::filesystem::remove_all(dir);
  return 0;
}
