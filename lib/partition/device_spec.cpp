#include "partition/device_spec.h"

#include "core/error.h"

namespace omnibal::partition {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kGiB = 1024.0 * kMiB;

// Published figures: A100-SXM4-80GB (312 TFLOP/s bf16 dense, 2.04 TB/s, NVLink3 600 GB/s
// bidirectional, HDR InfiniBand 200 Gb/s per GPU in a DGX A100); H100-SXM5 (989 TFLOP/s,
// 3.35 TB/s, NVLink4 900 GB/s bidirectional, NDR 400 Gb/s per GPU); H200 (H100 compute and
// links, 4.8 TB/s). Capacities are binary, as nvidia-smi reports them: "80GB" parts have
// 80 GiB (81920 MiB on an A100), the H200 143771 MiB. Collective latency: NCCL all-reduces of
// small buffers inside an NVLink node take ~10 us (nccl-tests, 2-8 GPUs); an assumption.
const std::vector<DeviceSpec>& table() {
  static const std::vector<DeviceSpec> devices = {
      {"a100-80g", 312e12, 80.0 * kGiB, 2.039e12, 300e9, 25e9, 8, 10e-6},
      {"h100", 989e12, 80.0 * kGiB, 3.35e12, 450e9, 50e9, 8, 10e-6},
      {"h200", 989e12, 143771.0 * kMiB, 4.8e12, 450e9, 50e9, 8, 10e-6},
  };
  return devices;
}

}  // namespace

DeviceSpec device_spec(const std::string& name) {
  for (const auto& d : table())
    if (d.name == name) return d;
  OMNIBAL_FAIL("unknown device '", name, "', expected a100-80g | h100 | h200");
}

DeviceSpec host_device(double link_bandwidth) {
  OMNIBAL_CHECK(link_bandwidth > 0, "host device: link bandwidth must be > 0 bytes/s, got ",
                link_bandwidth);
  return {"host", 0.0, 0.0, 0.0, link_bandwidth, link_bandwidth, 1 << 20, 0.0};
}

std::vector<std::string> device_names() {
  std::vector<std::string> names;
  for (const auto& d : table()) names.push_back(d.name);
  return names;
}

}  // namespace omnibal::partition
