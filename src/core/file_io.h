// Whole-file reads and crash-safe writes (temporary file, then rename).
#pragma once

#include <cstddef>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gpulab/status.h"

namespace gpulab {

// Reads a whole file. Missing file: kNotFound; a directory or unreadable file: kIoError.
Result<std::vector<std::byte>> read_file_bytes(const std::filesystem::path& path);
Result<std::string> read_file_text(const std::filesystem::path& path);

// Writes `bytes` to `path.tmp-<pid>` and renames it over `path`, so that a reader never sees a
// half-written file.
Status write_file_atomic(const std::filesystem::path& path, std::span<const std::byte> bytes);
Status write_file_atomic(const std::filesystem::path& path, std::string_view text);

}  // namespace gpulab
