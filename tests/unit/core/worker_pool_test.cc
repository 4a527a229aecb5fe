#include "core/worker_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>

namespace gpulab {
namespace {

TEST(WorkerPool, WaitReturnsAfterEveryJobRanOnAWorkerInRange) {
  WorkerPool pool(4);
  ASSERT_EQ(pool.threads(), 4);
  std::atomic<int> done = 0;
  std::mutex m;
  std::set<int> workers;
  for (int i = 0; i < 200; ++i)
    pool.submit([&](int worker) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      {
        std::lock_guard lock(m);
        workers.insert(worker);
      }
      ++done;
    });
  pool.wait();
  EXPECT_EQ(done.load(), 200);
  EXPECT_GE(*workers.begin(), 0);
  EXPECT_LT(*workers.rbegin(), 4);
  // The pool is reusable after wait().
  pool.submit([&](int) { ++done; });
  pool.wait();
  EXPECT_EQ(done.load(), 201);
}

TEST(WorkerPool, JobsRunAtOnceOnTheCallerWithoutWorkers) {
  WorkerPool pool(0);
  EXPECT_EQ(pool.threads(), 0);
  const auto caller = std::this_thread::get_id();
  int ran_as = -1;
  std::thread::id ran_on;
  pool.submit([&](int worker) {
    ran_as = worker;
    ran_on = std::this_thread::get_id();
  });
  EXPECT_EQ(ran_as, 0);  // before wait(): it already ran
  EXPECT_EQ(ran_on, caller);
  pool.wait();
}

TEST(WorkerPool, OneWorkerRunsJobsInOrderOfSubmission) {
  WorkerPool pool(1);
  std::vector<int> order;
  for (int i = 0; i < 50; ++i) pool.submit([&order, i](int) { order.push_back(i); });
  pool.wait();
  ASSERT_EQ(order.size(), 50u);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(order[static_cast<size_t>(i)], i);
}

TEST(WorkerPool, DestructionRunsTheJobsStillQueued) {
  std::atomic<int> done = 0;
  {
    WorkerPool pool(2);
    for (int i = 0; i < 20; ++i)
      pool.submit([&](int) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        ++done;
      });
  }
  EXPECT_EQ(done.load(), 20);
}

TEST(WorkerPool, JobsRunConcurrently) {
  // Two jobs that each wait for the other to start finish only if two workers run them at once.
  WorkerPool pool(2);
  std::atomic<int> started = 0;
  std::atomic<bool> both = true;
  for (int i = 0; i < 2; ++i)
    pool.submit([&](int) {
      ++started;
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (started.load() < 2)
        if (std::chrono::steady_clock::now() > until) {
          both = false;
          return;
        }
    });
  pool.wait();
  EXPECT_TRUE(both.load());
}

}  // namespace
}  // namespace gpulab
