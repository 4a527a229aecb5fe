#include "core/file_io.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <system_error>

#include "core/interrupt.h"

namespace gpulab {

Result<std::vector<std::byte>> read_file_bytes(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    return Status::not_found("'" + path.string() + "': no such file. Check the path.");
  if (std::filesystem::is_directory(path, ec))
    return Status::io_error("'" + path.string() + "' is a directory, not a file.");
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::io_error("'" + path.string() + "': cannot open (" + std::strerror(errno) + ").");
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  in.seekg(0, std::ios::beg);
  if (size <= 0) {
    // Files that report no size (/proc/self/cmdline) but have content: read to the end.
    std::vector<std::byte> bytes;
    char buf[4096];
    while (in.read(buf, sizeof(buf)) || in.gcount() > 0) {
      const auto* p = reinterpret_cast<const std::byte*>(buf);
      bytes.insert(bytes.end(), p, p + in.gcount());
    }
    return bytes;
  }
  std::vector<std::byte> bytes(static_cast<size_t>(size));
  if (!in.read(reinterpret_cast<char*>(bytes.data()), size))
    return Status::io_error("'" + path.string() + "': read failed after " + std::to_string(in.gcount()) +
                            " of " + std::to_string(size) + " bytes.");
  return bytes;
}

Result<std::string> read_file_text(const std::filesystem::path& path) {
  GPULAB_ASSIGN_OR_RETURN(auto bytes, read_file_bytes(path));
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

Status write_file_atomic(const std::filesystem::path& path, std::span<const std::byte> bytes) {
  const std::filesystem::path tmp = path.string() + ".tmp-" + std::to_string(::getpid());
  const TemporaryFileGuard guard(tmp);  // removed if SIGINT/SIGTERM ends the process meanwhile
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out)
      return Status::io_error("'" + tmp.string() + "': cannot create (" + std::strerror(errno) + ").");
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    if (!out) {
      std::error_code ec;
      std::filesystem::remove(tmp, ec);
      return Status::io_error("'" + tmp.string() + "': write failed (" + std::strerror(errno) + ").");
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    return Status::io_error("'" + path.string() + "': cannot rename temporary file (" + ec.message() + ").");
  }
  return Status::ok();
}

Status write_file_atomic(const std::filesystem::path& path, std::string_view text) {
  return write_file_atomic(path, std::as_bytes(std::span(text.data(), text.size())));
}

}  // namespace gpulab
