// Class labels: loading a label file and mapping a model output index to its label.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "gpulab/status.h"

namespace gpulab {

// One label per line, line i = class i (e.g. /work/shared/models/imagenet_classes.txt: 1000
// lines, ImageNet-1k in torchvision / TF-Slim order). Trailing "\r" and surrounding spaces are
// trimmed; blank lines are kept as empty labels (they hold a class index); a final newline does not
// make an extra label. An empty file: kInvalidFile; missing: kNotFound.
Result<std::vector<std::string>> load_labels(const std::filesystem::path& path);
// The same from the file's text; `source_name` names it in messages.
Result<std::vector<std::string>> parse_labels(std::string_view text, std::string_view source_name);

// The label of output `index` of a classifier with `num_classes` outputs.
//  - num_classes == labels.size(): labels[index].
//  - num_classes == labels.size() + 1: the model has a leading "background" class (TF-Slim
//    classifiers trained with 1001 outputs): index 0 is "background" and index i is labels[i - 1].
//    (The shared mobilenet_v2_1.0_224.onnx had that row removed and has 1000 outputs.)
//  - otherwise, or index outside [0, num_classes): "class <index>".
std::string label_for(int64_t index, const std::vector<std::string>& labels, int64_t num_classes);

// The offset to subtract from a model output index to index `labels` (0 or 1, as above); -1 when
// num_classes does not fit the label count.
int64_t label_offset(int64_t num_classes, size_t label_count);

}  // namespace gpulab
