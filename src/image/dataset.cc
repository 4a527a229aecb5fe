#include "image/dataset.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <system_error>

#include <fmt/format.h>

#include "core/file_io.h"

namespace fs = std::filesystem;

namespace gpulab {

bool has_image_extension(const fs::path& path) {
  std::string ext = path.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png" || ext == ".bmp" || ext == ".ppm";
}

Result<std::vector<fs::path>> list_images(std::span<const std::string> files_or_folders) {
  std::vector<fs::path> out;
  for (const std::string& arg : files_or_folders) {
    const fs::path path(arg);
    std::error_code ec;
    const fs::file_status st = fs::status(path, ec);
    if (ec || !fs::exists(st)) {
      return Status::not_found(fmt::format("'{}': no such file or folder. Check the path.", arg));
    }
    if (!fs::is_directory(st)) {
      out.push_back(path);
      continue;
    }
    std::vector<fs::path> found;
    for (fs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
      std::error_code type_ec;
      if (it->is_regular_file(type_ec) && has_image_extension(it->path())) found.push_back(it->path());
    }
    if (ec) return Status::io_error(fmt::format("'{}': cannot list the folder ({}).", arg, ec.message()));
    if (found.empty()) {
      return Status::not_found(
          fmt::format("no images in '{}' (looked for .jpg, .jpeg, .png, .bmp, .ppm). "
                      "Pass a folder that holds images, or the image files.",
                      arg));
    }
    std::sort(found.begin(), found.end());
    out.insert(out.end(), found.begin(), found.end());
  }
  return out;
}

Result<std::vector<LabelledImage>> load_labelled_folder(const fs::path& folder) {
  std::error_code ec;
  if (!fs::is_directory(folder, ec)) {
    return Status::not_found(fmt::format("dataset '{}': no such folder. Check the path.", folder.string()));
  }
  const fs::path tsv = folder / "labels.tsv";
  if (!fs::exists(tsv, ec)) {
    return Status::not_found(
        fmt::format("dataset '{}': no labels.tsv. A labelled folder needs labels.tsv with "
                    "rows '<file><TAB><class index>[<TAB><wnid>]'.",
                    folder.string()));
  }
  GPULAB_ASSIGN_OR_RETURN(std::string text, read_file_text(tsv));
  // The error_code overloads: a row's path can be too long or unreadable, and the throwing
  // overloads would end the process on that.
  auto images = parse_labels_tsv(text, folder, tsv.string(), [](const fs::path& p) {
    std::error_code ec;
    return fs::exists(p, ec);
  });
  if (images.is_ok() && images->empty()) {
    return Status::invalid_file(fmt::format("dataset '{}': labels.tsv lists no images.", folder.string()));
  }
  return images;
}

Result<std::vector<LabelledImage>> parse_labels_tsv(
    std::string_view text, const fs::path& folder, std::string_view source_name,
    const std::function<bool(const fs::path&)>& image_exists) {
  std::vector<LabelledImage> images;
  size_t start = 0;
  int line_no = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    start = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_no == 1 && line.starts_with("file\t"))) continue;
    const size_t tab1 = line.find('\t');
    const size_t tab2 = tab1 == std::string_view::npos ? tab1 : line.find('\t', tab1 + 1);
    auto bad = [&](std::string_view what) {
      return Status::invalid_file(
          fmt::format("dataset '{}' line {}: {} ('{}'). Expected "
                      "'<file><TAB><class index>[<TAB><wnid>]'.",
                      source_name, line_no, what, line));
    };
    if (tab1 == std::string_view::npos) return bad("no tab");
    LabelledImage item;
    item.path = folder / fs::path(std::string(line.substr(0, tab1)));
    const std::string_view index =
        line.substr(tab1 + 1, tab2 == std::string_view::npos ? std::string_view::npos : tab2 - tab1 - 1);
    const auto [ptr, ec] = std::from_chars(index.data(), index.data() + index.size(), item.label);
    if (ec != std::errc() || ptr != index.data() + index.size() || item.label < 0)
      return bad("bad class index");
    if (tab2 != std::string_view::npos) item.wnid = std::string(line.substr(tab2 + 1));
    if (!image_exists(item.path)) return bad(fmt::format("image '{}' is missing", item.path.string()));
    images.push_back(std::move(item));
  }
  return images;
}

}  // namespace gpulab
