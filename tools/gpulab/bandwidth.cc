// gpulab bandwidth: H2D, D2H, bidirectional and D2D copy bandwidth, pinned vs pageable vs
// write-combined host memory, across sizes, against the PCIe link's theoretical rate.
#ifdef GPULAB_HAVE_TELEMETRY

#include <unistd.h>

#include <cstdio>

#include "cli.h"
#include "measure/bandwidth.h"

namespace gpulab::cli {

void add_bandwidth_command(CLI::App& app) {
  struct Options {
    int device = 0;
    std::string sizes, copies = "h2d,d2h,bidir,d2d", memory = "pinned,pageable,write-combined";
    int repeats = 20;
    int warmup = 3;
    bool json = false;
    bool csv = false;
  };
  auto opts = std::make_shared<Options>();
  CLI::App* sub =
      app.add_subcommand("bandwidth", "Measure host<->device and device copy bandwidth (GB/s = 1e9 B/s)");
  sub->add_option("--device", opts->device, "CUDA device ordinal")->check(CLI::NonNegativeNumber);
  sub->add_option("--sizes", opts->sizes, "Copy sizes, e.g. 4K,1M,256M,1G (default 4K..1G in x4 steps)");
  sub->add_option("--copies", opts->copies, "Copy kinds: h2d,d2h,bidir,d2d")->capture_default_str();
  sub->add_option("--memory", opts->memory, "Host memory kinds: pinned,pageable,write-combined")
      ->capture_default_str();
  sub->add_option("--repeats", opts->repeats, "Timed copies per point (the median is reported)")
      ->check(CLI::Range(1, 10000))
      ->capture_default_str();
  sub->add_option("--warmup", opts->warmup, "Untimed copies per point")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  auto* json = sub->add_flag("--json", opts->json, "Print JSON");
  sub->add_flag("--csv", opts->csv, "Print CSV")->excludes(json);
  on_run(sub, [opts] {
    measure::BandwidthOptions options;
    options.cuda_device = opts->device;
    options.repeats = opts->repeats;
    options.warmup = opts->warmup;
    if (!opts->sizes.empty()) {
      auto sizes = measure::parse_sizes(opts->sizes);
      if (!sizes.is_ok()) return report(sizes.status());
      options.sizes_bytes = sizes.value();
    }
    auto kinds = measure::parse_copy_kinds(opts->copies);
    if (!kinds.is_ok()) return report(kinds.status());
    options.kinds = kinds.value();
    auto memory = measure::parse_host_memory(opts->memory);
    if (!memory.is_ok()) return report(memory.status());
    options.host_memory = memory.value();
    const bool progress = isatty(STDERR_FILENO) != 0;
    auto result = measure::run_bandwidth_test(options, [&](const measure::BandwidthPoint& p) {
      if (progress)
        std::fprintf(stderr, "\r%-6s %-15s %12llu B  %8.2f GB/s   ",
                     std::string(measure::copy_kind_name(p.kind)).c_str(),
                     std::string(measure::host_memory_name(p.memory)).c_str(),
                     static_cast<unsigned long long>(p.size_bytes), p.gb_s);
    });
    if (progress) std::fprintf(stderr, "\r%60s\r", "");
    if (!result.is_ok()) return report(result.status());
    if (opts->json)
      std::printf("%s\n", measure::to_json(result.value()).dump(2).c_str());
    else if (opts->csv)
      std::printf("%s", measure::to_csv(result.value()).c_str());
    else
      std::printf("%s", measure::format_table(result.value()).c_str());
    return 0;
  });
}

}  // namespace gpulab::cli

#endif  // GPULAB_HAVE_TELEMETRY
