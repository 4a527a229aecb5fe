// The plan file reader: a round trip keeps everything; truncated, corrupted or foreign bytes are
// refused with kInvalidFile (never a crash); a plan for another GPU or library is refused.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <limits>
#include <span>

#include "plan/plan.h"

namespace gpulab {
namespace {

Plan small_plan() {
  Plan plan;
  plan.target = {"NVIDIA H200", 90, 13000, 91900, 130100};
  plan.gpulab_version = "0.1.0";
  plan.precision = Precision::kFp16;
  plan.max_batch = 8;
  plan.input_name = "input";
  plan.input_channels = 3;
  plan.input_h = 8;
  plan.input_w = 8;
  plan.output_name = "logits";
  plan.num_classes = 10;
  plan.values = {{"x", 8, 8, 8, 3, DataType::kFloat16},
                 {"conv", 8, 8, 16, 16, DataType::kFloat16},
                 {"pool", 1, 1, 16, 16, DataType::kFloat16},
                 {"fc", 1, 1, 10, 10, DataType::kFloat16}};
  PlanWeight w{"conv.w", DataType::kFloat16, Shape{16, 3, 3, 8}, {}};
  w.bytes.resize(16 * 3 * 3 * 8 * 2);
  for (size_t i = 0; i < w.bytes.size(); ++i) w.bytes[i] = static_cast<std::byte>(i * 7);
  PlanWeight b{"conv.b", DataType::kFloat16, Shape{16}, std::vector<std::byte>(32, std::byte{1})};
  PlanWeight fw{"fc.w", DataType::kFloat16, Shape{10, 16}, std::vector<std::byte>(320, std::byte{2})};
  plan.weights = {w, b, fw};
  PlanStep in{.kind = StepKind::kInput, .name = "input", .inputs = {}, .output = 0};
  PlanStep conv{.kind = StepKind::kConv, .name = "conv1", .inputs = {0}, .output = 1};
  conv.conv.kernel = {3, 3};
  conv.conv.pads = {1, 1, 1, 1};
  conv.conv.activation = Activation::kClip;
  conv.weight = 0;
  conv.bias = 1;
  conv.tactic = "cudnn:e12;k1=3";
  conv.flops_per_image = 1234.5;
  PlanStep pool{.kind = StepKind::kGlobalAveragePool, .name = "gap", .inputs = {1}, .output = 2};
  PlanStep fc{.kind = StepKind::kGemm, .name = "fc", .inputs = {2}, .output = 3};
  fc.weight = 2;
  PlanStep out{.kind = StepKind::kOutput, .name = "output", .inputs = {3}, .output = -1};
  plan.steps = {in, conv, pool, fc, out};
  return plan;
}

TEST(PlanFile, RoundTripKeepsEverything) {
  const Plan plan = small_plan();
  ASSERT_TRUE(plan.validate().is_ok()) << plan.validate().to_string();
  const auto bytes = serialize_plan(plan);
  auto back = deserialize_plan(bytes);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->target, plan.target);
  EXPECT_EQ(back->precision, Precision::kFp16);
  EXPECT_EQ(back->max_batch, 8);
  EXPECT_EQ(back->num_classes, 10);
  ASSERT_EQ(back->steps.size(), plan.steps.size());
  EXPECT_EQ(back->steps[1].tactic, "cudnn:e12;k1=3");
  EXPECT_EQ(back->steps[1].conv.pads, (Pads{1, 1, 1, 1}));
  EXPECT_EQ(back->steps[1].conv.activation, Activation::kClip);
  EXPECT_DOUBLE_EQ(back->steps[1].flops_per_image, 1234.5);
  ASSERT_EQ(back->weights.size(), 3u);
  EXPECT_EQ(back->weights[0].bytes, plan.weights[0].bytes);
  EXPECT_EQ(back->weights[2].shape, (Shape{10, 16}));
  EXPECT_EQ(back->values[1].c, 16);
  // Serializing again gives the same bytes (deterministic).
  EXPECT_EQ(serialize_plan(*back), bytes);
}

TEST(PlanFile, EveryTruncationIsRefused) {
  const auto bytes = serialize_plan(small_plan());
  for (size_t n = 0; n < bytes.size(); n += (n < 64 ? 1 : 13)) {
    auto r = deserialize_plan(std::span(bytes).first(n));
    ASSERT_FALSE(r.is_ok()) << "length " << n;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidFile) << r.status().to_string();
  }
}

TEST(PlanFile, FlippedBytesAreRefused) {
  const auto bytes = serialize_plan(small_plan());
  for (size_t at = 0; at < bytes.size(); at += 11) {
    auto copy = bytes;
    copy[at] ^= std::byte{0x5a};
    auto r = deserialize_plan(copy);
    ASSERT_FALSE(r.is_ok()) << "byte " << at;
    EXPECT_NE(r.status().message().find("plan"), std::string::npos);
  }
}

TEST(PlanFile, BadMagicAndVersion) {
  auto bytes = serialize_plan(small_plan());
  auto copy = bytes;
  copy[0] = std::byte{'X'};
  auto r = deserialize_plan(copy);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("magic"), std::string::npos);
  copy = bytes;
  copy[8] = std::byte{99};
  r = deserialize_plan(copy);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(r.status().message().find("version 99"), std::string::npos);
}

// FNV-1a 64 of `bytes`, the file's trailing checksum.
uint64_t fnv1a64(std::span<const std::byte> bytes) {
  uint64_t h = 14695981039346656037ull;
  for (std::byte b : bytes) h = (h ^ static_cast<uint8_t>(b)) * 1099511628211ull;
  return h;
}

// Version-1 files (before folded casts), version-2 files (before softmax outputs and pointwise
// steps), version-3 files (before the view steps) and version-4 files (before INT8/FP8 plans) are
// still read; version 5 is what gets written, and version 6 is refused.
TEST(PlanFile, ReadsTheOlderVersions) {
  for (const uint32_t older : {1u, 2u, 3u, 4u, 5u}) {
    auto bytes = serialize_plan(small_plan());
    uint32_t written = 0;
    std::memcpy(&written, bytes.data() + 8, 4);
    EXPECT_EQ(written, kPlanFormatVersion);
    EXPECT_EQ(kPlanFormatVersion, 6u);
    std::memcpy(bytes.data() + 8, &older, 4);
    const uint64_t sum = fnv1a64(std::span(bytes).first(bytes.size() - 8));
    std::memcpy(bytes.data() + bytes.size() - 8, &sum, 8);
    auto r = deserialize_plan(bytes);
    ASSERT_TRUE(r.is_ok()) << "version " << older << ": " << r.status().to_string();
    EXPECT_EQ(r->steps.size(), small_plan().steps.size());
    EXPECT_FALSE(r->steps.back().softmax);
  }
  auto bytes = serialize_plan(small_plan());
  const uint32_t newer = kPlanFormatVersion + 1;
  std::memcpy(bytes.data() + 8, &newer, 4);
  const uint64_t sum = fnv1a64(std::span(bytes).first(bytes.size() - 8));
  std::memcpy(bytes.data() + bytes.size() - 8, &sum, 8);
  auto r = deserialize_plan(bytes);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(r.status().message().find("reads versions 1 to 6"), std::string::npos) << r.status().message();
}

// What version 5 added (int8/fp8e4m3 values and weights with their scales, the precisions int8 and
// fp8, fake_quantize) is read from version-5 files only: the same bytes labelled version 4 are
// refused, naming what version 4 cannot hold; a version-4 file's weight_scale field is ignored.
TEST(PlanFile, QuantizedPlansNeedVersion5) {
  auto relabel = [](std::vector<std::byte> bytes, uint32_t version) {
    std::memcpy(bytes.data() + 8, &version, 4);
    const uint64_t sum = fnv1a64(std::span(bytes).first(bytes.size() - 8));
    std::memcpy(bytes.data() + bytes.size() - 8, &sum, 8);
    return bytes;
  };
  Plan plan = small_plan();
  plan.precision = Precision::kInt8;
  plan.values[1].dtype = DataType::kInt8;
  plan.values[1].scale = 0.25f;
  plan.steps[1].precision = Precision::kInt8;
  // (A version-5 INT8 plan's round trip: QuantizedPlan.PlanFileKeepsScalesAndRefusesBadOnes.)
  auto r4 = deserialize_plan(relabel(serialize_plan(plan), 4));
  ASSERT_FALSE(r4.is_ok());
  EXPECT_EQ(r4.status().code(), StatusCode::kInvalidFile);
  EXPECT_NE(r4.status().message().find("the plan has precision int8, which plan format version 5 added, "
                                       "in a version-4 file"),
            std::string::npos)
      << r4.status().message();

  Plan fp16 = small_plan();
  fp16.values[1].dtype = DataType::kInt8;
  fp16.values[1].scale = 0.25f;
  r4 = deserialize_plan(relabel(serialize_plan(fp16), 4));
  ASSERT_FALSE(r4.is_ok());
  EXPECT_NE(r4.status().message().find("value 'conv' has type int8"), std::string::npos)
      << r4.status().message();

  // A float plan whose conv names weight scales: refused by validate in version 5, where the field
  // means something; in version 4 the field did not exist and is not read.
  Plan stray = small_plan();
  stray.weights.push_back({"conv.s", DataType::kFloat32, Shape{16}, std::vector<std::byte>(64)});
  stray.steps[1].weight_scale = 3;
  const auto stray_bytes = serialize_plan(stray);
  auto r5 = deserialize_plan(relabel(stray_bytes, 5));
  ASSERT_FALSE(r5.is_ok());
  EXPECT_NE(r5.status().message().find("names weight scales"), std::string::npos) << r5.status().message();
  r4 = deserialize_plan(relabel(stray_bytes, 4));
  ASSERT_TRUE(r4.is_ok()) << r4.status().to_string();
  EXPECT_EQ(r4->steps[1].weight_scale, -1);
}

// A header that parses and carries a valid checksum but points outside the weights or at
// missing values is still refused.
TEST(PlanFile, InconsistentHeaderWithValidChecksumIsRefused) {
  Plan plan = small_plan();
  plan.steps[2].inputs = {42};
  auto r = deserialize_plan(serialize_plan(plan));
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidFile);
  EXPECT_NE(r.status().message().find("reads value 42"), std::string::npos) << r.status().message();

  plan = small_plan();
  plan.weights[0].shape = Shape{16, 3, 3, 9};
  r = deserialize_plan(serialize_plan(plan));
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("conv.w"), std::string::npos) << r.status().message();
}

// The file with its JSON header passed through `edit` (header length and checksum rewritten).
std::vector<std::byte> with_header(const std::vector<std::byte>& file, std::string (*edit)(std::string)) {
  uint64_t header_size = 0;
  std::memcpy(&header_size, file.data() + 16, 8);
  const std::string header = edit(std::string(reinterpret_cast<const char*>(file.data()) + 24, header_size));
  std::vector<std::byte> out(file.begin(), file.begin() + 16);
  const uint64_t new_size = header.size();
  out.resize(24 + new_size);
  std::memcpy(out.data() + 16, &new_size, 8);
  std::memcpy(out.data() + 24, header.data(), new_size);
  out.insert(out.end(), file.begin() + 24 + static_cast<std::ptrdiff_t>(header_size), file.end() - 8);
  const uint64_t sum = fnv1a64(out);
  out.resize(out.size() + 8);
  std::memcpy(out.data() + out.size() - 8, &sum, 8);
  return out;
}

// A weight table entry pointing past the end of the file, with a valid checksum: refused before
// anything is copied.
TEST(PlanFile, WeightOffsetsOutsideTheFileAreRefused) {
  const auto file = serialize_plan(small_plan());
  for (auto edit : {+[](std::string h) {
                      const size_t at = h.rfind("\"offset\":");
                      return h.replace(at, 10, "\"offset\":18446744073709551000,\"old\":");
                    },
                    +[](std::string h) {
                      const size_t at = h.rfind("\"bytes\":");
                      return h.replace(at, 9, "\"bytes\":1000000000000,\"old\":");
                    }}) {
    auto r = deserialize_plan(with_header(file, edit));
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidFile);
    EXPECT_NE(r.status().message().find("outside the weights block"), std::string::npos)
        << r.status().message();
  }
}

// A number beyond its field's type in a list (a weight's shape of 1e308): converting it would be
// undefined behaviour (fuzz_plan found it in a view's dims), so the file is refused as invalid.
TEST(PlanFile, NumbersBeyondTheirTypeAreRefused) {
  auto r = deserialize_plan(with_header(
      serialize_plan(small_plan()), +[](std::string h) {
        const size_t at = h.find("\"shape\":[");
        return h.replace(at, 9, "\"shape\":[1e308,");
      }));
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidFile);
  EXPECT_NE(r.status().message().find("integer field"), std::string::npos) << r.status().message();
}

// Sizes within each field's own range whose products overflow or ask for more memory than any GPU
// has: refused by validate, before the runtime's memory planner multiplies them.
TEST(PlanFile, SizesWhoseProductsOverflowAreRefused) {
  Plan plan = small_plan();
  plan.values[1] = {"conv", 1 << 20, 1 << 20, 1 << 24, 16, DataType::kFloat16};  // 2^64 elements
  EXPECT_EQ(plan.validate().code(), StatusCode::kInvalidFile);
  plan = small_plan();
  plan.max_batch = int64_t{1} << 40;
  EXPECT_EQ(plan.validate().code(), StatusCode::kInvalidFile);
  plan = small_plan();
  plan.input_channels = int64_t{1} << 62;
  EXPECT_EQ(plan.validate().code(), StatusCode::kInvalidFile);
  plan = small_plan();
  plan.weights[1].shape = Shape{int64_t{1} << 32, int64_t{1} << 32};
  const Status s = plan.validate();
  EXPECT_EQ(s.code(), StatusCode::kInvalidFile);
  EXPECT_NE(s.message().find("conv.b"), std::string::npos) << s.message();
}

// A Clip with only a min (or only a max) has an infinite bound, which JSON writes as null: the
// plan must read it back as that infinity, not refuse the file.
TEST(PlanFile, InfiniteClipBoundsRoundTrip) {
  Plan plan = small_plan();
  plan.steps[1].conv.clip_min = 0.0f;
  plan.steps[1].conv.clip_max = std::numeric_limits<float>::infinity();
  plan.steps[1].clip_min = -std::numeric_limits<float>::infinity();
  auto back = deserialize_plan(serialize_plan(plan));
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->steps[1].conv.clip_min, 0.0f);
  EXPECT_EQ(back->steps[1].conv.clip_max, std::numeric_limits<float>::infinity());
  EXPECT_EQ(back->steps[1].clip_min, -std::numeric_limits<float>::infinity());
}

TEST(PlanFile, RandomGarbageIsRefused) {
  std::vector<std::byte> junk(4096);
  uint32_t s = 12345;
  for (auto& b : junk) {
    s = s * 1664525u + 1013904223u;
    b = static_cast<std::byte>(s >> 24);
  }
  std::memcpy(junk.data(), kPlanMagic, 8);
  junk[8] = std::byte{1};
  junk[9] = junk[10] = junk[11] = std::byte{0};
  EXPECT_FALSE(deserialize_plan(junk).is_ok());
}

TEST(PlanFile, SaveAndLoadThroughAFile) {
  const auto path = std::filesystem::temp_directory_path() / "gpulab_plan_file_test.plan";
  ASSERT_TRUE(save_plan(small_plan(), path).is_ok());
  auto back = load_plan(path);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->steps.size(), 5u);
  std::filesystem::remove(path);
  auto missing = load_plan(path);
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

TEST(PlanTarget, OtherArchitectureOrLibraryIsRefused) {
  const PlanTarget built{"NVIDIA H200", 90, 13000, 91900, 130100};
  EXPECT_TRUE(check_plan_target(built, built).is_ok());
  PlanTarget other_board = built;
  other_board.gpu_name = "NVIDIA H100 80GB HBM3";
  EXPECT_TRUE(check_plan_target(built, other_board).is_ok());
  PlanTarget ampere = built;
  ampere.compute_capability = 80;
  auto s = check_plan_target(built, ampere);
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  EXPECT_NE(s.message().find("sm_90"), std::string::npos);
  EXPECT_NE(s.message().find("sm_80"), std::string::npos);
  PlanTarget new_cudnn = built;
  new_cudnn.cudnn_version = 92000;
  s = check_plan_target(built, new_cudnn);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("92000"), std::string::npos);
}

TEST(Precision, NamesRoundTrip) {
  for (Precision p : {Precision::kFp32, Precision::kTf32, Precision::kFp16, Precision::kBf16}) {
    auto back = parse_precision(precision_name(p));
    ASSERT_TRUE(back.is_ok());
    EXPECT_EQ(*back, p);
  }
  EXPECT_FALSE(parse_precision("int4").is_ok());
  EXPECT_EQ(storage_dtype(Precision::kTf32), DataType::kFloat32);
  EXPECT_EQ(storage_dtype(Precision::kBf16), DataType::kBFloat16);
}

}  // namespace
}  // namespace gpulab
