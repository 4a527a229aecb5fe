// Bandwidth option parsing and report formats; the metrics server; the CUDA driver loader.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <thread>

#include "measure/bandwidth.h"
#include "telemetry/cuda_driver.h"
#include "telemetry/metrics_server.h"

namespace gpulab {
namespace {

TEST(BandwidthOptions, DefaultSizesSpan4KiBTo1GiB) {
  const auto s = measure::default_sizes();
  ASSERT_EQ(s.size(), 10u);
  EXPECT_EQ(s.front(), 4096u);
  EXPECT_EQ(s.back(), 1ULL << 30);
  for (size_t i = 1; i < s.size(); ++i) EXPECT_EQ(s[i], 4 * s[i - 1]);
}

TEST(BandwidthOptions, ParsesSizesWithBinarySuffixes) {
  auto r = measure::parse_sizes("4K,1M,256m,1G,100");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r.value(), (std::vector<std::uint64_t>{4096, 1 << 20, 256u << 20, 1ULL << 30, 100}));
}

TEST(BandwidthOptions, RejectsBadSizes) {
  for (const char* bad : {"4X", "K", "0", "-4K", "1.5M", "", "17G", "4K,,x"}) {
    auto r = measure::parse_sizes(bad);
    EXPECT_FALSE(r.is_ok()) << bad;
    if (!r.is_ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    }
  }
}

TEST(BandwidthOptions, ParsesCopyKindsAndHostMemory) {
  auto k = measure::parse_copy_kinds("h2d,d2d");
  ASSERT_TRUE(k.is_ok());
  EXPECT_EQ(k.value(), (std::vector<measure::CopyKind>{measure::CopyKind::kHostToDevice,
                                                       measure::CopyKind::kDeviceToDevice}));
  auto m = measure::parse_host_memory("pinned,wc");
  ASSERT_TRUE(m.is_ok());
  EXPECT_EQ(m.value(), (std::vector<measure::HostMemory>{measure::HostMemory::kPinned,
                                                         measure::HostMemory::kWriteCombined}));
  auto bad = measure::parse_copy_kinds("h2d,sideways");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("'sideways'"), std::string::npos);
  EXPECT_NE(bad.status().message().find("bidir"), std::string::npos);
}

measure::BandwidthReport sample_report() {
  measure::BandwidthReport r;
  r.device_name = "NVIDIA H200";
  r.uuid = "GPU-x";
  r.pcie_gen = 5;
  r.pcie_width = 16;
  r.pcie_gb_s = 63.015;
  r.points.push_back({.kind = measure::CopyKind::kHostToDevice,
                      .memory = measure::HostMemory::kPinned,
                      .size_bytes = 1ULL << 30,
                      .repeats = 20,
                      .median_ms = 19.5,
                      .min_ms = 19.4,
                      .max_ms = 19.9,
                      .gb_s = 55.06,
                      .peak_share = 55.06 / 63.015});
  r.points.push_back({.kind = measure::CopyKind::kDeviceToHost,
                      .memory = measure::HostMemory::kPageable,
                      .size_bytes = 4096,
                      .repeats = 20,
                      .median_ms = 0.01,
                      .min_ms = 0.009,
                      .max_ms = 0.02,
                      .gb_s = 0.41,
                      .peak_share = std::nullopt});
  return r;
}

TEST(BandwidthReport, TableCsvAndJson) {
  const auto r = sample_report();
  const std::string table = measure::format_table(r);
  EXPECT_NE(table.find("gen5 x16"), std::string::npos) << table;
  EXPECT_NE(table.find("h2d    pinned"), std::string::npos) << table;
  EXPECT_NE(table.find("1 GiB"), std::string::npos) << table;
  EXPECT_NE(table.find("55.06"), std::string::npos) << table;
  EXPECT_NE(table.find("87%"), std::string::npos) << table;
  EXPECT_NE(table.find("N/A"), std::string::npos) << table;
  const std::string csv = measure::to_csv(r);
  EXPECT_EQ(csv.substr(0, csv.find('\n')),
            "copy,host_memory,size_bytes,repeats,median_ms,min_ms,max_ms,gb_s,peak_share");
  EXPECT_NE(csv.find("h2d,pinned,1073741824,20,19.500000,"), std::string::npos) << csv;
  EXPECT_NE(csv.find(",N/A\n"), std::string::npos);
  const auto j = measure::to_json(r);
  EXPECT_EQ(j.at("pcie_gen").get<int>(), 5);
  EXPECT_TRUE(j.at("memory_gb_s").is_null());
  ASSERT_EQ(j.at("points").size(), 2u);
  EXPECT_EQ(j.at("points")[0].at("copy").get<std::string>(), "h2d");
  EXPECT_EQ(j.at("points")[1].at("host_memory").get<std::string>(), "pageable");
  EXPECT_TRUE(j.at("points")[1].at("peak_share").is_null());
}

TEST(Bandwidth, WithoutDriverSaysWhy) {
  auto r = measure::run_bandwidth_test({.sizes_bytes = {4096}, .repeats = 1});
  if (r.is_ok()) GTEST_SKIP() << "a CUDA driver and GPU are present";
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_FALSE(r.status().message().empty());
}

TEST(Bandwidth, RejectsBadRepeatsBeforeTouchingTheDriver) {
  auto r = measure::run_bandwidth_test({.repeats = 0});
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

TEST(TelemetryCudaDriver, FormatsUuidLikeNvml) {
  const unsigned char b[16] = {0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef,
                               0x10, 0x32, 0x54, 0x76, 0x98, 0xba, 0xdc, 0xfe};
  EXPECT_EQ(telemetry::cuda::format_gpu_uuid(b), "GPU-01234567-89ab-cdef-1032-547698badcfe");
}

TEST(MetricsServer, ParsesListenAddresses) {
  auto a = telemetry::parse_listen_address("0.0.0.0:9400");
  ASSERT_TRUE(a.is_ok());
  EXPECT_EQ(a.value(), (std::pair<std::string, int>{"0.0.0.0", 9400}));
  EXPECT_EQ(telemetry::parse_listen_address(":9400").value().first, "0.0.0.0");
  EXPECT_EQ(telemetry::parse_listen_address("[::1]:80").value().first, "::1");
  for (const char* bad : {"9400", "host:", "host:0", "host:70000", "host:12ab", ""})
    EXPECT_FALSE(telemetry::parse_listen_address(bad).is_ok()) << bad;
}

TEST(MetricsServer, ServesRenderedTextAndReports503OnError) {
  std::atomic<bool> fail{false};
  auto server = telemetry::MetricsServer::bind("127.0.0.1", 0, [&fail]() -> Result<std::string> {
    if (fail) return Status::unavailable("no GPU");
    return std::string("DCGM_FI_DEV_GPU_TEMP{gpu=\"0\",uuid=\"u\",name=\"n\"} 42\n");
  });
  ASSERT_TRUE(server.is_ok()) << server.status().to_string();
  const int port = server.value()->port();
  ASSERT_GT(port, 0);
  std::thread serving([&] { EXPECT_TRUE(server.value()->serve().is_ok()); });
  httplib::Client client("127.0.0.1", port);
  auto res = client.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->body, "DCGM_FI_DEV_GPU_TEMP{gpu=\"0\",uuid=\"u\",name=\"n\"} 42\n");
  EXPECT_NE(res->get_header_value("Content-Type").find("version=0.0.4"), std::string::npos);
  fail = true;
  auto res2 = client.Get("/metrics");
  ASSERT_TRUE(res2);
  EXPECT_EQ(res2->status, 503);
  EXPECT_NE(res2->body.find("no GPU"), std::string::npos);
  server.value()->stop();
  serving.join();
}

// The status code of a raw HTTP response ("HTTP/1.1 404 Not Found\r\n..." -> 404); 0 when none.
int response_status(const std::string& response) {
  if (response.rfind("HTTP/1.1 ", 0) != 0 || response.size() < 12) return 0;
  return std::stoi(response.substr(9, 3));
}

TEST(MetricsServer, AnswersRequestsInProcessReadOnly) {
  auto server =
      telemetry::MetricsServer::unbound([]() -> Result<std::string> { return std::string("m 1\n"); });
  const std::string ok = server->answer_raw_request("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(response_status(ok), 200) << ok;
  EXPECT_NE(ok.find("\r\n\r\nm 1\n"), std::string::npos) << ok;
  EXPECT_EQ(response_status(server->answer_raw_request("GET / HTTP/1.0\r\n\r\n")), 200);
  EXPECT_EQ(response_status(server->answer_raw_request("GET /nothing HTTP/1.1\r\n\r\n")), 404);
  // Read-only: no other method changes or reaches anything.
  for (const char* method : {"POST", "PUT", "DELETE", "PATCH", "OPTIONS"}) {
    const std::string r = server->answer_raw_request(std::string(method) +
                                                     " /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\na=1");
    const int status = response_status(r);
    EXPECT_TRUE(status >= 400 && status < 500) << method << ": " << r;
  }
  // Not HTTP at all, an absurd length, a broken chunk: a 4xx answer, never 2xx or a crash.
  for (const char* bad : {"GARBAGE\r\n\r\n", "GET\r\n\r\n", "GET /metrics HTTP/9.9\r\n\r\n",
                          "POST / HTTP/1.1\r\nContent-Length: 18446744073709551616\r\n\r\n",
                          "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"}) {
    const std::string r = server->answer_raw_request(bad);
    const int status = response_status(r);
    EXPECT_TRUE(status >= 400 && status < 500) << bad << ": " << r;
  }
}

TEST(MetricsServer, BindFailureIsAnIoError) {
  auto first =
      telemetry::MetricsServer::bind("127.0.0.1", 0, [] { return Result<std::string>(std::string()); });
  ASSERT_TRUE(first.is_ok());
  auto second = telemetry::MetricsServer::bind("127.0.0.1", first.value()->port(),
                                               [] { return Result<std::string>(std::string()); });
  ASSERT_FALSE(second.is_ok());
  EXPECT_EQ(second.status().code(), StatusCode::kIoError);
}

}  // namespace
}  // namespace gpulab
