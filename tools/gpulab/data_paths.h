// Where the CLI finds its bundled data (the default model, labels and photos).
//
// Searched in order: $GPULAB_DATA_DIR; <exe>/../share/gpulab (installed); the source tree the
// binary was built from (<exe> lives in build/<preset>/); the current directory.
#pragma once

#include <string>

#include "gpulab/status.h"

namespace gpulab::cli {

Result<std::string> default_model_path();   // models/mobilenet_v2_1.0_224.onnx
Result<std::string> default_labels_path();  // models/imagenet_classes.txt
Result<std::string> default_images_dir();   // data/images

}  // namespace gpulab::cli
