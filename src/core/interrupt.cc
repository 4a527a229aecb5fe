#include "core/interrupt.h"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>

namespace gpulab {
namespace {

// Fixed storage the signal handler can read without allocating or locking: a slot is free (0),
// being filled (1) or holds a path to remove (2).
constexpr int kSlots = 16;
constexpr size_t kPathBytes = 4096;
std::atomic<int> g_slot_state[kSlots];
char g_slot_path[kSlots][kPathBytes];

std::atomic<int> g_signal{0};
std::atomic<bool> g_polling{false};

static_assert(std::atomic<int>::is_always_lock_free && std::atomic<bool>::is_always_lock_free,
              "the signal handler needs lock-free atomics");

// Only async-signal-safe calls: unlink, sigaction, raise.
void on_signal(int sig) {
  g_signal.store(sig);
  if (g_polling.load()) return;
  for (int i = 0; i < kSlots; ++i)
    if (g_slot_state[i].load() == 2) ::unlink(g_slot_path[i]);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(sig, &dfl, nullptr);
  ::raise(sig);
}

}  // namespace

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

void set_interrupt_polling(bool polling) {
  g_polling.store(polling);
}

int interrupt_signal() {
  return g_signal.load();
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
