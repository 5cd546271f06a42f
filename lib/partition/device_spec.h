// A small table of accelerators for analytic costs: dense bf16 peak, HBM capacity and bandwidth,
// and the two link bandwidths the simulator needs (NVLink inside a node, the per-GPU network
// link between nodes) plus the fixed latency of one collective call. Figures are the vendors' published peaks; the efficiencies that turn
// peaks into achieved rates live in analytic_cost_model.h, not here.
#pragma once

#include <string>
#include <vector>

namespace omnibal::partition {

/// One accelerator type (per GPU figures).
struct DeviceSpec {
  std::string name;                 ///< "a100-80g" | "h100" | "h200"
  double peak_flops = 0;            ///< dense bf16 tensor-core FLOP/s
  double memory_bytes = 0;          ///< HBM capacity, bytes
  double hbm_bandwidth = 0;         ///< bytes/s
  double intra_node_bandwidth = 0;  ///< NVLink, bytes/s per direction per GPU
  double inter_node_bandwidth = 0;  ///< network per GPU (one NIC per GPU), bytes/s per direction
  int gpus_per_node = 8;
  double collective_latency_s = 0;  ///< seconds per all-reduce call inside a node (TP, small)
};

/// Looks a device up by name. Throws omnibal::Error listing the known names otherwise.
DeviceSpec device_spec(const std::string& name);

/// A CPU host whose costs are all measured (a profiled cost table and StageOverheads): no
/// compute peak, memory or HBM figures (0), both links at `link_bandwidth` bytes/s (MPI over
/// shared memory between ranks of one machine), every rank in one "node", no collective
/// latency (a measured TP link is given to the simulator apart, tensor_parallel.h). Throws
/// omnibal::Error when the bandwidth is not positive.
DeviceSpec host_device(double link_bandwidth);

/// Names of the known devices.
std::vector<std::string> device_names();

}  // namespace omnibal::partition
