// SIGINT/SIGTERM while a file is being written: the process ends (by the signal, or with 128 +
// signal under an InterruptWatch), and the temporary file of the write in progress is gone
// (core/interrupt.h). Each case runs in a forked child, so that the test process keeps its own
// signal dispositions and mask.
#include "core/interrupt.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/file_io.h"

namespace gpulab {
namespace {

namespace fs = std::filesystem;

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("gpulab_interrupt_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir / name;
}

// Forks a child that runs `body`; the parent waits for the child's byte on a pipe (the body is
// where the signal should land), sends `sig`, and returns the child's wait status.
template <typename Body>
int signal_child_during(int sig, Body body) {
  int ready[2];
  if (::pipe(ready) != 0) return -1;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(ready[0]);
    install_interrupt_handlers();
    body(ready[1]);
    ::_exit(0);  // the signal should have ended the child before this
  }
  ::close(ready[1]);
  char byte = 0;
  const bool got = ::read(ready[0], &byte, 1) == 1;
  ::close(ready[0]);
  if (got) ::kill(pid, sig);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

TEST(Interrupt, SignalDuringAWriteRemovesTheTemporaryFileAndEndsBySignal) {
  for (int sig : {SIGINT, SIGTERM}) {
    const fs::path out = scratch("plan.bin");
    const fs::path tmp = out.string() + ".tmp-partial";
    fs::remove(out);
    const int status = signal_child_during(sig, [&](int ready_fd) {
      // What write_file_atomic does while it writes: a registered temporary file, half written.
      const TemporaryFileGuard guard(tmp);
      std::ofstream(tmp) << "half a plan";
      const char byte = 1;
      (void)::write(ready_fd, &byte, 1);
      for (;;) ::pause();
    });
    ASSERT_TRUE(WIFSIGNALED(status)) << "signal " << sig << ", status " << status;
    EXPECT_EQ(WTERMSIG(status), sig);
    EXPECT_FALSE(fs::exists(tmp)) << "signal " << sig;
    EXPECT_FALSE(fs::exists(out)) << "signal " << sig;
  }
}

TEST(Interrupt, FilesWrittenBeforeTheSignalStayComplete) {
  const fs::path out = scratch("result.json");
  const int status = signal_child_during(SIGTERM, [&](int ready_fd) {
    if (!write_file_atomic(out, std::string_view("{\"complete\": true}\n")).is_ok()) ::_exit(3);
    const char byte = 1;
    (void)::write(ready_fd, &byte, 1);
    for (;;) ::pause();
  });
  ASSERT_TRUE(WIFSIGNALED(status));
  auto text = read_file_text(out);
  ASSERT_TRUE(text.is_ok());
  EXPECT_EQ(text.value(), "{\"complete\": true}\n");
  for (const auto& entry : fs::directory_iterator(out.parent_path()))
    EXPECT_EQ(entry.path().string().find(".tmp-"), std::string::npos) << entry.path();
}

// A command under an InterruptWatch that does not stop within the grace period: the watcher
// removes the temporary file of the write in progress and ends the process with 128 + signal.
TEST(Interrupt, WatchRemovesTheTemporaryFileWhenTheGracePeriodEnds) {
  const fs::path tmp = scratch("sweep.json.tmp-partial");
  const int status = signal_child_during(SIGTERM, [&](int ready_fd) {
    InterruptWatch watch(/*grace_s=*/0.2);
    const TemporaryFileGuard guard(tmp);
    std::ofstream(tmp) << "half a result";
    const char byte = 1;
    (void)::write(ready_fd, &byte, 1);
    for (;;) ::usleep(1000);  // a step that never finishes
  });
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM);
  EXPECT_FALSE(fs::exists(tmp));
}

}  // namespace
}  // namespace gpulab
