// run_pipeline() with the CPU backend and a fingerprinting runner: every image's model input must
// be exactly what decode_image() + preprocess() give (what classify computed before it used the
// pipeline), whatever the batch, thread count and queue depth; bad files are skipped and named;
// a backend error stops the run; RSS stays flat over many passes.
#include <gtest/gtest.h>
#include <turbojpeg.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <vector>

#include "core/file_io.h"
#include "image/dataset.h"
#include "image/decode.h"
#include "pipeline/pipeline.h"
#include "test_support.h"

namespace gpulab {
namespace {

namespace fs = std::filesystem;

constexpr int kClasses = 8;

// kClasses pseudo-random +-1 projections of the input, summed in double: any change in any input
// value changes the scores.
std::vector<float> fingerprint(std::span<const float> image) {
  std::vector<double> acc(kClasses, 0.0);
  for (size_t i = 0; i < image.size(); ++i) {
    const uint32_t h = static_cast<uint32_t>(i) * 2654435761u;
    for (int j = 0; j < kClasses; ++j) acc[j] += ((h >> (j + 7)) & 1) ? image[i] : -image[i];
  }
  return std::vector<float>(acc.begin(), acc.end());
}

class FingerprintRunner final : public HostBatchRunner {
 public:
  explicit FingerprintRunner(int fail_on_call = -1, bool sets_up = false)
      : fail_on_call_(fail_on_call), sets_up_(sets_up) {}
  bool sets_up_per_batch_size() const override { return sets_up_; }
  // The batch size of every run(), in order.
  std::vector<int64_t> batches;
  Result<Tensor> run(const Tensor& input) override {
    batches.push_back(input.shape()[0]);
    if (calls_++ == fail_on_call_) return Status::device_error("fake runner: failing on purpose");
    const int64_t n = input.shape()[0], numel = input.numel() / n;
    Tensor out(DataType::kFloat32, Shape{n, kClasses});
    for (int64_t i = 0; i < n; ++i) {
      const auto f =
          fingerprint(input.f32().subspan(static_cast<size_t>(i * numel), static_cast<size_t>(numel)));
      std::copy(f.begin(), f.end(), out.f32().begin() + i * kClasses);
    }
    return out;
  }

 private:
  int fail_on_call_;
  bool sets_up_;
  int calls_ = 0;
};

Image pattern_image(int width, int height, int seed) {
  Image image;
  image.width = width;
  image.height = height;
  image.rgb.resize(static_cast<size_t>(width) * height * 3);
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x)
      for (int c = 0; c < 3; ++c)
        image.rgb[(static_cast<size_t>(y) * width + x) * 3 + c] =
            static_cast<uint8_t>((x * (c + 1) + y * (seed + 2) + ((x * y) >> 5)) % 256);
  return image;
}

void write_jpeg(const fs::path& path, const Image& image) {
  tjhandle tj = tjInitCompress();
  unsigned char* out = nullptr;
  unsigned long size = 0;
  ASSERT_EQ(tjCompress2(tj, image.rgb.data(), image.width, 0, image.height, TJPF_RGB, &out, &size, TJSAMP_420,
                        90, 0),
            0);
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(out), static_cast<std::streamsize>(size));
  tjFree(out);
  tjDestroy(tj);
}

// The scores classify's former path (decode_image, preprocess) gives each file.
std::vector<float> direct_scores(const fs::path& file, const PreprocessSpec& spec) {
  auto image = decode_image(file);
  if (!image.is_ok()) return {};
  std::vector<float> input(static_cast<size_t>(spec.image_numel()));
  if (!preprocess(*image, spec, input).is_ok()) return {};
  return fingerprint(input);
}

void expect_predictions_match(const PipelineResult& r, const std::vector<fs::path>& files,
                              const PreprocessSpec& spec) {
  ASSERT_EQ(r.predictions.size(), files.size());
  for (size_t i = 0; i < files.size(); ++i) {
    const std::vector<float> expected = direct_scores(files[i], spec);
    ASSERT_EQ(r.predictions[i].size(), static_cast<size_t>(kClasses)) << files[i];
    for (const Prediction& p : r.predictions[i]) {
      ASSERT_GE(p.index, 0);
      ASSERT_EQ(p.score, expected[static_cast<size_t>(p.index)]) << files[i] << " class " << p.index;
    }
    for (size_t k = 1; k < r.predictions[i].size(); ++k)
      ASSERT_GE(r.predictions[i][k - 1].score, r.predictions[i][k].score);
  }
}

// Batches of 3 on 2 decode threads, every class's score kept, full-size decodes (classify's pixels).
PipelineOptions small_exact_run(std::vector<fs::path> files, const PreprocessSpec& spec) {
  return {.files = std::move(files),
          .spec = spec,
          .batch = 3,
          .decode_threads = 2,
          .top_k = kClasses,
          .dct_scaling = false};
}

class PipelineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("gpulab_pipeline_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::vector<fs::path> bundled_and_large() {
    auto files = list_images(std::vector<std::string>{(testing::source_dir() / "data/images").string()});
    EXPECT_TRUE(files.is_ok());
    std::vector<fs::path> out = *files;
    write_jpeg(dir_ / "large.jpg", pattern_image(1024, 768, 1));  // decoded at 1/2 with DCT scaling
    write_jpeg(dir_ / "tall.jpg", pattern_image(300, 900, 2));
    out.push_back(dir_ / "large.jpg");
    out.push_back(dir_ / "tall.jpg");
    return out;
  }

  fs::path dir_;
};

TEST_F(PipelineTest, PredictionsEqualDirectPreprocessingForAnyShape) {
  const std::vector<fs::path> files = bundled_and_large();
  const auto spec = PreprocessSpec::torchvision_imagenet();
  struct Shape3 {
    int64_t batch;
    int threads, depth, loop;
  };
  for (const Shape3 s : {Shape3{1, 1, 2, 1}, Shape3{2, 3, 2, 2}, Shape3{3, 2, 3, 3}, Shape3{256, 4, 4, 2}}) {
    SCOPED_TRACE(::testing::Message()
                 << "batch " << s.batch << " threads " << s.threads << " depth " << s.depth);
    auto backend = make_cpu_backend(std::make_unique<FingerprintRunner>(), spec);
    std::vector<PipelineProgress> progress;
    auto r = run_pipeline({.files = files,
                           .spec = spec,
                           .batch = s.batch,
                           .decode_threads = s.threads,
                           .queue_depth = s.depth,
                           .loop = s.loop,
                           .top_k = kClasses,
                           .dct_scaling = false,
                           .progress = [&](const PipelineProgress& p) { progress.push_back(p); }},
                          *backend);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    expect_predictions_match(*r, files, spec);
    EXPECT_TRUE(r->errors.empty());
    const int64_t total = static_cast<int64_t>(files.size()) * s.loop;
    EXPECT_EQ(r->stats.images, total);
    EXPECT_EQ(r->stats.dct_scaled_images, 0);
    EXPECT_TRUE(r->stats.files_cached);
    ASSERT_EQ(r->stats.stages.size(), 3u);
    EXPECT_EQ(r->stats.stages[1].images, total);
    EXPECT_EQ(r->stats.stages[2].images, total);
    ASSERT_FALSE(progress.empty());
    EXPECT_EQ(progress.back().images_done, total);
    for (size_t i = 1; i < progress.size(); ++i)
      EXPECT_GT(progress[i].images_done, progress[i - 1].images_done);
  }
}

TEST_F(PipelineTest, DctScalingDecodesLargeJpegsSmallerAndKeepsSmallOnesExact) {
  const std::vector<fs::path> files = bundled_and_large();
  const auto spec = PreprocessSpec::torchvision_imagenet();
  auto backend = make_cpu_backend(std::make_unique<FingerprintRunner>(), spec);
  auto r = run_pipeline({.files = files, .spec = spec, .batch = 4, .top_k = kClasses}, *backend);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  // large.jpg (1024x768 at 1/2: 512x384) and the bundled parrot.jpg (512x929 at 1/2: 256x465) are
  // decoded smaller; tall.jpg (300x900: 1/2 would leave 150 columns) and the other bundled JPEGs
  // (512x384) exactly as classify decodes them.
  int64_t scaled = 0;
  for (size_t i = 0; i < files.size(); ++i) {
    auto bytes = read_file_bytes(files[i]);
    ASSERT_TRUE(bytes.is_ok());
    Image image;
    auto info = decode_image_into(*bytes, files[i].string(), {.min_shorter_side = 256}, &image);
    ASSERT_TRUE(info.is_ok());
    if (info->scale_num != info->scale_denom) {
      ++scaled;
      continue;
    }
    const std::vector<float> expected = direct_scores(files[i], spec);
    for (const Prediction& p : r->predictions[i])
      EXPECT_EQ(p.score, expected[static_cast<size_t>(p.index)]) << files[i];
  }
  EXPECT_EQ(scaled, 2);
  EXPECT_EQ(r->stats.dct_scaled_images, scaled);
}

TEST_F(PipelineTest, BadFilesAreSkippedAndNamedAndTheRunGoesOn) {
  std::vector<fs::path> files = bundled_and_large();
  std::ifstream in(dir_ / "large.jpg", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::ofstream(dir_ / "truncated.jpg", std::ios::binary) << bytes.substr(0, bytes.size() / 3);
  std::ofstream(dir_ / "junk.png", std::ios::binary) << "this is not an image";
  files.insert(files.begin() + 2, dir_ / "truncated.jpg");
  files.insert(files.begin() + 4, dir_ / "junk.png");
  files.push_back(dir_ / "gone.jpg");  // listed, then missing when read
  const auto spec = PreprocessSpec::torchvision_imagenet();
  auto backend = make_cpu_backend(std::make_unique<FingerprintRunner>(), spec);
  PipelineOptions options = small_exact_run(files, spec);
  options.loop = 2;
  auto r = run_pipeline(options, *backend);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  ASSERT_EQ(r->errors.size(), 3u);
  EXPECT_EQ(r->errors[0].path, dir_ / "truncated.jpg");
  EXPECT_EQ(r->errors[0].status.code(), StatusCode::kInvalidFile);
  EXPECT_NE(r->errors[0].status.message().find("truncated.jpg"), std::string::npos);
  EXPECT_EQ(r->errors[1].path, dir_ / "junk.png");
  EXPECT_EQ(r->errors[1].status.code(), StatusCode::kUnsupported);
  EXPECT_EQ(r->errors[2].path, dir_ / "gone.jpg");
  EXPECT_EQ(r->errors[2].status.code(), StatusCode::kNotFound);
  EXPECT_EQ(r->stats.failed_images, 6);
  for (size_t i = 0; i < files.size(); ++i) {
    const bool bad = files[i].filename() == "truncated.jpg" || files[i].filename() == "junk.png" ||
                     files[i].filename() == "gone.jpg";
    EXPECT_EQ(r->predictions[i].empty(), bad) << files[i];
    if (bad) continue;
    const std::vector<float> expected = direct_scores(files[i], spec);
    for (const Prediction& p : r->predictions[i]) EXPECT_EQ(p.score, expected[static_cast<size_t>(p.index)]);
  }
}

TEST_F(PipelineTest, BackendErrorStopsTheRun) {
  const std::vector<fs::path> files = bundled_and_large();
  const auto spec = PreprocessSpec::torchvision_imagenet();
  auto backend = make_cpu_backend(std::make_unique<FingerprintRunner>(/*fail_on_call=*/2), spec);
  auto r = run_pipeline(
      {.files = files, .spec = spec, .batch = 1, .decode_threads = 3, .queue_depth = 2, .loop = 5}, *backend);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDeviceError);
  EXPECT_NE(r.status().message().find("failing on purpose"), std::string::npos);
}

// A runner that sets up per batch size (the GPU engine behind --preprocess cpu) runs once before
// the clock and only ever at the slots' full batch, the last, partial batch included; the
// predictions are the same. A runner that does not sees the last batch at its own size.
TEST_F(PipelineTest, ARunnerThatSetsUpPerBatchSizeSeesOnlyTheFullBatch) {
  const std::vector<fs::path> files = bundled_and_large();  // 7 files: batches of 3, 3 and 1
  ASSERT_EQ(files.size() % 3, 1u);
  const auto spec = PreprocessSpec::torchvision_imagenet();
  for (const bool sets_up : {true, false}) {
    SCOPED_TRACE(sets_up ? "sets up per batch size" : "no set-up");
    auto runner = std::make_unique<FingerprintRunner>(-1, sets_up);
    FingerprintRunner* seen = runner.get();
    auto backend = make_cpu_backend(std::move(runner), spec);
    PipelineOptions options = small_exact_run(files, spec);
    options.queue_depth = 2;
    auto r = run_pipeline(options, *backend);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    expect_predictions_match(*r, files, spec);
    const std::vector<int64_t> expected =
        sets_up ? std::vector<int64_t>{3, 3, 3, 3} : std::vector<int64_t>{3, 3, 1};
    EXPECT_EQ(seen->batches, expected);
  }
}

TEST_F(PipelineTest, BadOptionsAreRejected) {
  const auto spec = PreprocessSpec::torchvision_imagenet();
  auto backend = make_cpu_backend(std::make_unique<FingerprintRunner>(), spec);
  const std::vector<fs::path> one = {testing::source_dir() / "data/images/cat.bmp"};
  EXPECT_EQ(run_pipeline({.spec = spec}, *backend).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(run_pipeline({.files = one, .spec = spec, .batch = 0}, *backend).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(run_pipeline({.files = one, .spec = spec, .queue_depth = 1}, *backend).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(run_pipeline({.files = one, .spec = spec, .loop = 0}, *backend).status().code(),
            StatusCode::kInvalidArgument);
  PreprocessSpec other = spec;
  other.output_size = 100;
  EXPECT_EQ(run_pipeline({.files = one, .spec = other}, *backend).status().code(),
            StatusCode::kInvalidArgument);
}

// Memory stays flat: after pass 1 (files cached, slots and per-thread buffers at their size), 40
// more passes leave no more allocated: the heap in use grows by less than a small, fixed allowance.
// The resident set is recorded but not bounded: under AddressSanitizer it grew 60 MB over such a run
// on CI (freed memory waits in ASan's quarantine), and glibc's per-thread arenas can likewise keep
// freed chunks; neither is memory the pipeline keeps.
TEST_F(PipelineTest, MemoryStaysFlatOverManyPasses) {
  std::vector<fs::path> files;
  for (int i = 0; i < 16; ++i) {
    files.push_back(dir_ / ("photo" + std::to_string(i) + ".jpg"));
    write_jpeg(files.back(), pattern_image(640 + 16 * i, 480 - 8 * i, i));
  }
  const auto spec = PreprocessSpec::torchvision_imagenet();
  auto backend = make_cpu_backend(std::make_unique<FingerprintRunner>(), spec);
  auto r = run_pipeline(
      {.files = files, .spec = spec, .batch = 8, .decode_threads = 2, .queue_depth = 3, .loop = 41},
      *backend);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const PipelineStats& s = r->stats;
  ASSERT_GT(s.rss_after_first_pass_bytes, 0) << "no /proc/self/status";
  if (s.heap_after_first_pass_bytes <= 0)
    GTEST_SKIP() << "neither the C library nor a sanitizer reports the heap in use here";
  const int64_t heap_growth = s.heap_before_last_pass_bytes - s.heap_after_first_pass_bytes;
  RecordProperty("heap_growth_bytes", std::to_string(heap_growth));
  RecordProperty("rss_growth_bytes", std::to_string(s.rss_final_bytes - s.rss_after_first_pass_bytes));
  EXPECT_LT(heap_growth, int64_t{1} << 20) << "heap in use after pass 1 " << s.heap_after_first_pass_bytes
                                           << ", after pass 40 " << s.heap_before_last_pass_bytes;
  EXPECT_EQ(s.images, 16 * 41);
}

// The 1,000 shared sample photos: the pipeline's inputs equal classify's former path for every one.
TEST_F(PipelineTest, SamplePhotosEqualDirectPreprocessing) {
  const auto shared = testing::shared_dir();
  if (!shared)
    GTEST_SKIP() << "no shared data folder (set GPULAB_SHARED_DIR): the sample photos are not here";
  const fs::path folder = *shared / "datasets/imagenet-sample-256";
  auto labelled = load_labelled_folder(folder);
  if (!labelled.is_ok()) GTEST_SKIP() << "no sample photos: " << labelled.status().to_string();
  std::vector<fs::path> files;
  for (const auto& item : *labelled) files.push_back(item.path);
  const auto spec = PreprocessSpec::torchvision_imagenet();
  auto backend = make_cpu_backend(std::make_unique<FingerprintRunner>(), spec);
  // DCT scaling on (the pipeline's default): these photos' shorter side is at most 256, so no
  // JPEG is scaled and every input must still be exact.
  auto r = run_pipeline({.files = files, .spec = spec, .batch = 64, .top_k = kClasses}, *backend);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->stats.dct_scaled_images, 0);
  EXPECT_TRUE(r->errors.empty());
  expect_predictions_match(*r, files, spec);
}

}  // namespace
}  // namespace gpulab
