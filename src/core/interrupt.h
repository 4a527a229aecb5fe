// SIGINT (Ctrl-C) and SIGTERM. Every output file of gpulab is written whole under a temporary name
// and renamed (write_file_atomic), so it is complete or absent; what happens on a signal depends
// on whether the command watches for it.
//
// A long-running command that can stop between steps (sweep, monitor) creates an InterruptWatch:
// the signal becomes a flag that the command checks between steps, so it can end with its output
// files complete and resumable. Undo actions registered with on_signal (such as restoring a GPU's
// power limit) run at once, on the watcher's thread, before anything else; if the command has not
// returned within `grace_s` of the signal, the watcher removes the temporary file of any write in
// progress and ends the process with _exit(128 + signal), so that an interrupted command never
// hangs. Start it first in a command, before any other thread exists: it blocks the two signals
// in the calling thread, which every thread created later inherits, and one thread waits for them
// with sigtimedwait.
//
// Any other command (build, bench, classify ...) ends at once: the handlers main() installs with
// install_interrupt_handlers remove the temporary file of a write in progress, then end the
// process by the same signal with its default action.
//
// Exit codes follow the shell's convention either way: 130 for SIGINT, 143 for SIGTERM.
#pragma once

#include <atomic>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace gpulab {

class InterruptWatch {
 public:
  explicit InterruptWatch(double grace_s = 10.0);
  ~InterruptWatch();  // stops watching and restores the signal mask
  InterruptWatch(const InterruptWatch&) = delete;
  InterruptWatch& operator=(const InterruptWatch&) = delete;

  const std::atomic<bool>& interrupted() const { return interrupted_; }
  int signal_number() const { return signal_.load(); }  // 0 until a signal arrives
  int exit_code() const { return 128 + signal_.load(); }

  // `undo` runs on the watcher's thread when a signal arrives (once), and must be thread-safe
  // against the command. Registered actions run in reverse order of registration.
  void on_signal(std::function<void()> undo);

 private:
  void watch();

  double grace_s_;
  std::atomic<bool> interrupted_{false};
  std::atomic<int> signal_{0};
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::vector<std::function<void()>> undo_;
  std::thread thread_;
  bool restore_mask_ = false;
};

// Installs the SIGINT and SIGTERM handlers of commands without an InterruptWatch (not for a signal
// the parent process set to be ignored, as a shell does for SIGINT of `cmd &`). Idempotent.
void install_interrupt_handlers();

// While alive, registers `path` as a temporary file to remove if a signal ends the process before
// the file is renamed (write_file_atomic uses it). At most 16 at once (later ones are simply not
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
