#include "core/interrupt.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>

namespace gpulab {
namespace {

sigset_t interrupt_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

// Fixed storage that a signal handler can read without allocating or locking: a slot is free (0),
// being filled (1) or holds the path of a temporary file being written (2).
constexpr int kSlots = 16;
constexpr size_t kPathBytes = 4096;
std::atomic<int> g_slot_state[kSlots];
char g_slot_path[kSlots][kPathBytes];
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs lock-free atomics");

// Async-signal-safe: only unlink.
void remove_temporary_files() {
  for (int i = 0; i < kSlots; ++i)
    if (g_slot_state[i].load() == 2) ::unlink(g_slot_path[i]);
}

// Only async-signal-safe calls: unlink, sigaction, raise.
void on_signal(int sig) {
  remove_temporary_files();
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(sig, &dfl, nullptr);
  ::raise(sig);
}

}  // namespace

InterruptWatch::InterruptWatch(double grace_s) : grace_s_(grace_s) {
  const sigset_t set = interrupt_signals();
  sigset_t old;
  // Only when neither signal was blocked before: a process started with them blocked keeps that.
  if (pthread_sigmask(SIG_BLOCK, &set, &old) == 0) {
    restore_mask_ = !sigismember(&old, SIGINT) && !sigismember(&old, SIGTERM);
  }
  thread_ = std::thread([this] { watch(); });
}

InterruptWatch::~InterruptWatch() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  if (restore_mask_ && !interrupted_) {
    const sigset_t set = interrupt_signals();
    pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
  }
}

void InterruptWatch::on_signal(std::function<void()> undo) {
  std::lock_guard lock(mutex_);
  undo_.push_back(std::move(undo));
}

void InterruptWatch::watch() {
  const sigset_t set = interrupt_signals();
  const timespec poll{.tv_sec = 0, .tv_nsec = 100'000'000};
  while (!stop_) {
    const int sig = sigtimedwait(&set, nullptr, &poll);
    if (sig <= 0) continue;
    signal_ = sig;
    {
      std::lock_guard lock(mutex_);
      for (auto it = undo_.rbegin(); it != undo_.rend(); ++it) (*it)();
      undo_.clear();
    }
    interrupted_ = true;
    std::fprintf(stderr, "\ngpulab: %s received: stopping after the current step\n",
                 sig == SIGINT ? "SIGINT" : "SIGTERM");
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace_s_);
    while (!stop_) {
      // A second signal, or the grace period over: end now (outputs are complete or absent).
      const int again = sigtimedwait(&set, nullptr, &poll);
      if (again > 0 || std::chrono::steady_clock::now() >= deadline) {
        remove_temporary_files();
        std::fflush(stdout);
        std::fflush(stderr);
        _exit(128 + sig);
      }
    }
    return;
  }
}

void install_interrupt_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int sig : {SIGINT, SIGTERM}) {
    // A signal the parent set to be ignored stays ignored (a shell's `cmd &` ignores SIGINT).
    struct sigaction old {};
    if (::sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
    ::sigaction(sig, &sa, nullptr);
  }
}

TemporaryFileGuard::TemporaryFileGuard(const std::filesystem::path& path) {
  const std::string& text = path.native();
  if (text.size() >= kPathBytes) return;
  for (int i = 0; i < kSlots; ++i) {
    int expected = 0;
    if (g_slot_state[i].compare_exchange_strong(expected, 1)) {
      std::memcpy(g_slot_path[i], text.c_str(), text.size() + 1);
      g_slot_state[i].store(2);
      slot_ = i;
      return;
    }
  }
}

TemporaryFileGuard::~TemporaryFileGuard() {
  if (slot_ >= 0) g_slot_state[slot_].store(0);
}

}  // namespace gpulab
