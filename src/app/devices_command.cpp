// app/devices_command.cpp — `hindsight devices`: the accelerators this build can use.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <thread>

#include "app/commands.h"
#ifdef HS_WITH_CUDA
#include "backend/cuda/device_info.h"
#endif

namespace hs::app {
namespace {

int run_devices() {
  fmt::print("cpu: {} hardware threads\n", std::thread::hardware_concurrency());
#ifdef HS_WITH_CUDA
  fmt::print("cuda: {}\n", cuda::runtime_version_string());
  auto devs = cuda::list_devices();
  if (!devs.is_ok()) {
    fmt::print("cuda: {}\n", devs.status().message());
    return 0;
  }
  for (const auto& d : *devs)
    fmt::print("cuda:{} {} (sm_{}{}, {} SMs, {:.1f} GiB total, {:.1f} GiB free, bus {})\n", d.index, d.name,
               d.cc_major, d.cc_minor, d.multiprocessors, d.total_bytes / 1073741824.0,
               d.free_bytes / 1073741824.0, d.pci_bus_id);
#else
  fmt::print("cuda: not built (configure with the `cuda` preset)\n");
#endif
  return 0;
}

}  // namespace

void register_devices(CLI::App& app, std::function<int()>& run) {
  CLI::App* cmd = app.add_subcommand("devices", "List the CPU and CUDA devices this build can use");
  cmd->callback([&run] { run = [] { return run_devices(); }; });
}

}  // namespace hs::app
