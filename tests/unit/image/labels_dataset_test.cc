#include <gtest/gtest.h>

#include <unistd.h>
#include <fstream>
#include <string>
#include <vector>

#include "image/dataset.h"
#include "image/decode.h"
#include "image/labels.h"
#include "test_support.h"

namespace gpulab {
namespace {

namespace fs = std::filesystem;

// A fresh folder under the system temp dir, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() /
            (std::string("gpulab_image_") + info->name() + "_" + std::to_string(::getpid()));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }
  fs::path write(const std::string& name, const std::string& text) const {
    const fs::path p = path_ / name;
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }

 private:
  fs::path path_;
};

TEST(Labels, SharedImagenetClasses) {
  const auto shared = testing::shared_dir();
  if (!shared) GTEST_SKIP() << "no shared data folder (set GPULAB_SHARED_DIR)";
  auto labels = load_labels(*shared / "models" / "imagenet_classes.txt");
  ASSERT_TRUE(labels.is_ok()) << labels.status().to_string();
  ASSERT_EQ(labels->size(), 1000u);
  EXPECT_EQ((*labels)[0], "tench");
  EXPECT_EQ((*labels)[999], "toilet paper");
  // The shared MobileNetV2 has 1000 outputs: index i is labels[i].
  EXPECT_EQ(label_for(285, *labels, 1000), (*labels)[285]);
}

TEST(Labels, LinesAreTrimmedBlankLinesKeptFinalNewlineIgnored) {
  TempDir dir;
  auto labels = load_labels(dir.write("l.txt", "cat\r\n\n  dog \nbird"));
  ASSERT_TRUE(labels.is_ok());
  EXPECT_EQ(*labels, (std::vector<std::string>{"cat", "", "dog", "bird"}));
  labels = load_labels(dir.write("m.txt", "a\nb\n"));
  ASSERT_TRUE(labels.is_ok());
  EXPECT_EQ(labels->size(), 2u);
  EXPECT_EQ(load_labels(dir.write("e.txt", "")).status().code(), StatusCode::kInvalidFile);
  EXPECT_EQ(load_labels(dir.path() / "missing.txt").status().code(), StatusCode::kNotFound);
}

TEST(Labels, BackgroundOffsetFor1001Classes) {
  const std::vector<std::string> labels = {"tench", "goldfish", "shark"};
  EXPECT_EQ(label_offset(3, labels.size()), 0);
  EXPECT_EQ(label_offset(4, labels.size()), 1);
  EXPECT_EQ(label_offset(7, labels.size()), -1);
  EXPECT_EQ(label_for(0, labels, 3), "tench");
  EXPECT_EQ(label_for(2, labels, 3), "shark");
  EXPECT_EQ(label_for(0, labels, 4), "background");
  EXPECT_EQ(label_for(1, labels, 4), "tench");
  EXPECT_EQ(label_for(3, labels, 4), "shark");
  EXPECT_EQ(label_for(5, labels, 7), "class 5");  // labels do not fit the model
  EXPECT_EQ(label_for(3, labels, 3), "class 3");  // out of range
  EXPECT_EQ(label_for(-1, labels, 3), "class -1");
}

TEST(ListImages, FoldersAreFilteredAndSortedFilesKeptInOrder) {
  TempDir dir;
  dir.write("imgs/b.PNG", "x");
  dir.write("imgs/a.jpeg", "x");
  dir.write("imgs/c.JPG", "x");
  dir.write("imgs/d.bmp", "x");
  dir.write("imgs/notes.txt", "x");
  dir.write("imgs/sub/e.jpg", "x");
  const fs::path explicit_file = dir.write("other.dat", "x");
  const std::vector<std::string> args = {explicit_file.string(), (dir.path() / "imgs").string()};
  auto list = list_images(args);
  ASSERT_TRUE(list.is_ok()) << list.status().to_string();
  std::vector<std::string> names;
  for (const auto& p : *list) names.push_back(p.filename().string());
  EXPECT_EQ(names, (std::vector<std::string>{"other.dat", "a.jpeg", "b.PNG", "c.JPG", "d.bmp"}));
}

TEST(ListImages, FolderWithoutImagesAndMissingPathAreNotFound) {
  TempDir dir;
  dir.write("empty/readme.txt", "x");
  const std::string empty = (dir.path() / "empty").string();
  auto r = list_images(std::vector<std::string>{empty});
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("no images in '" + empty + "'"), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find(".jpg, .jpeg, .png, .bmp"), std::string::npos);
  auto missing = list_images(std::vector<std::string>{(dir.path() / "nope").string()});
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(has_image_extension("x/Y.JpEg"));
  EXPECT_FALSE(has_image_extension("x/y.gif"));
}

TEST(LabelledFolder, SharedImagenetSample) {
  const auto shared = testing::shared_dir();
  if (!shared) GTEST_SKIP() << "no shared data folder (set GPULAB_SHARED_DIR)";
  const fs::path folder = *shared / "datasets" / "imagenet-sample-256";
  if (!fs::exists(folder)) GTEST_SKIP() << "no " << folder;
  auto items = load_labelled_folder(folder);
  ASSERT_TRUE(items.is_ok()) << items.status().to_string();
  ASSERT_EQ(items->size(), 1000u);
  EXPECT_EQ((*items)[0].label, 0);
  EXPECT_EQ((*items)[0].wnid, "n01440764");
  EXPECT_EQ((*items)[0].path.filename(), "n01440764_tench.JPEG");
  EXPECT_EQ(items->back().label, 999);
  auto image = decode_image((*items)[0].path);
  ASSERT_TRUE(image.is_ok()) << image.status().to_string();
  EXPECT_EQ(std::min(image->width, image->height), 256);
}

TEST(LabelledFolder, MalformedRowsNameTheLine) {
  TempDir dir;
  dir.write("images/a.jpg", "x");
  dir.write("labels.tsv", "file\tindex\twnid\nimages/a.jpg\t3\tn0001\n");
  auto ok = load_labelled_folder(dir.path());
  ASSERT_TRUE(ok.is_ok()) << ok.status().to_string();
  ASSERT_EQ(ok->size(), 1u);
  EXPECT_EQ((*ok)[0].label, 3);
  EXPECT_EQ((*ok)[0].wnid, "n0001");

  dir.write("labels.tsv", "file\tindex\nimages/a.jpg\t3\nimages/a.jpg\tthree\n");
  auto bad = load_labelled_folder(dir.path());
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidFile);
  EXPECT_NE(bad.status().message().find("line 3"), std::string::npos) << bad.status().message();

  dir.write("labels.tsv", "images/missing.jpg\t1\n");
  auto missing = load_labelled_folder(dir.path());
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.status().message().find("missing.jpg"), std::string::npos);

  // A file name longer than the system's limit (ENAMETOOLONG): std::filesystem::exists without an
  // error_code threw filesystem_error here, which ended the calling command.
  dir.write("labels.tsv", std::string(5000, 'a') + ".jpg\t1\n");
  auto too_long = load_labelled_folder(dir.path());
  ASSERT_FALSE(too_long.is_ok());
  EXPECT_EQ(too_long.status().code(), StatusCode::kInvalidFile);
  EXPECT_NE(too_long.status().message().find("is missing"), std::string::npos);

  fs::remove(dir.path() / "labels.tsv");
  EXPECT_EQ(load_labelled_folder(dir.path()).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(load_labelled_folder(dir.path() / "nope").status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace gpulab
