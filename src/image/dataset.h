// Image file lists and labelled image folders.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "gpulab/status.h"

namespace gpulab {

// True for the extensions list_images() picks up in folders: .jpg .jpeg .png .bmp .ppm, any case.
bool has_image_extension(const std::filesystem::path& path);

// Expands files and folders into image paths, in argument order. A file is taken as given (its
// format is checked when decoded); a folder contributes its images (not recursive), sorted by
// name. A missing path or a folder without images: kNotFound.
Result<std::vector<std::filesystem::path>> list_images(std::span<const std::string> files_or_folders);

struct LabelledImage {
  std::filesystem::path path;  // absolute or relative to the working directory, as the folder was given
  int64_t label = 0;           // class index, 0-based (ImageNet-1k: torchvision order, 0..999)
  std::string wnid;            // WordNet id (e.g. "n01440764"); empty when the file has none
};

// Reads a labelled folder laid out like /work/shared/datasets/imagenet-sample-256:
//   <folder>/labels.tsv  header "file<TAB>index<TAB>wnid", then one row per image; `file` is
//                        relative to <folder>, `wnid` is optional.
// Images are listed in file order, not decoded. Missing folder or labels.tsv: kNotFound; a
// malformed row, or a row naming a missing image: kInvalidFile (the message names the line).
Result<std::vector<LabelledImage>> load_labelled_folder(const std::filesystem::path& folder);

// The rows of a labels.tsv's text, as load_labelled_folder reads them: paths joined to `folder`,
// each checked with `image_exists` (load_labelled_folder passes std::filesystem::exists).
// `source_name` names the file in messages.
Result<std::vector<LabelledImage>> parse_labels_tsv(
    std::string_view text, const std::filesystem::path& folder, std::string_view source_name,
    const std::function<bool(const std::filesystem::path&)>& image_exists);

}  // namespace gpulab
