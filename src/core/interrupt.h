// Interruption by SIGINT (Ctrl-C) or SIGTERM, for commands that write files.
//
// Every output file of gpulab is written whole under a temporary name and renamed
// (write_file_atomic), so it is either complete or absent. The handlers installed here also remove
// the temporary file of a write in progress, then end the process by the same signal with its
// default action: the command stops at once and its caller sees it killed by SIGINT or SIGTERM
// (exit status 130 or 143 in a shell), with no partial file left. A command with a loop of its own
// (monitor) asks for polling instead: the signal only sets a flag, which the loop reads at a point
// where its output is whole, and it returns 128 + the signal number itself.
#pragma once

#include <filesystem>

namespace gpulab {

// Installs the SIGINT and SIGTERM handlers (not for a signal the parent process set to be
// ignored, as a shell does for SIGINT of `cmd &`). Idempotent; main() calls it first.
void install_interrupt_handlers();

// true: a signal only sets interrupt_signal() (the caller polls it and stops by itself);
// false (default): the handler removes registered temporary files and re-raises the signal.
void set_interrupt_polling(bool polling);

// The signal (SIGINT or SIGTERM) received since the handlers were installed, or 0.
int interrupt_signal();

// While alive, registers `path` as a temporary file that the handler removes if the process is
// interrupted before the file is renamed. At most 16 at once (later ones are simply not
// registered). Not copyable.
class TemporaryFileGuard {
 public:
  explicit TemporaryFileGuard(const std::filesystem::path& path);
  ~TemporaryFileGuard();
  TemporaryFileGuard(const TemporaryFileGuard&) = delete;
  TemporaryFileGuard& operator=(const TemporaryFileGuard&) = delete;

 private:
  int slot_ = -1;
};

}  // namespace gpulab
