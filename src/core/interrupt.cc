#include "core/interrupt.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>

namespace gpulab {
namespace {

sigset_t interrupt_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
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
        std::fflush(stdout);
        std::fflush(stderr);
        _exit(128 + sig);
      }
    }
    return;
  }
}

}  // namespace gpulab
