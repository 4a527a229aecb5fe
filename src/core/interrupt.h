// SIGINT and SIGTERM for long-running commands (sweep, build, bench, monitor): the signal becomes a
// flag that the command checks between steps, so it can end with its output files complete (they
// are written with write_file_atomic) and resumable. Undo actions registered with on_signal (such
// as restoring a GPU's power limit) run at once, on the watcher's thread, before anything else; if
// the command has not returned within `grace_s` of the signal, the watcher ends the process with
// _exit(128 + signal), so that an interrupted command never hangs.
//
// Start it first in a command, before any other thread exists: it blocks the two signals in the
// calling thread, which every thread created later inherits, and one thread waits for them with
// sigtimedwait. Exit codes follow the shell's convention: 130 for SIGINT, 143 for SIGTERM.
#pragma once

#include <atomic>
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

}  // namespace gpulab
