// A fixed set of worker threads that run submitted jobs in order of submission, each job told which
// worker runs it, so that a caller can keep one resource per worker (a cuDNN handle, which one
// thread at a time may use) and create it on that worker's thread.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace gpulab {

class WorkerPool {
 public:
  // `threads` workers (none when threads <= 0: submit() then runs the job at once, as worker 0, on
  // the calling thread).
  explicit WorkerPool(int threads);
  ~WorkerPool();  // finishes the jobs submitted, then joins the workers
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  int threads() const { return static_cast<int>(workers_.size()); }
  // `job(worker)` on some worker, worker in [0, max(threads(), 1)). Jobs must not throw.
  void submit(std::function<void(int worker)> job);
  // Returns once every job submitted so far has finished.
  void wait();

 private:
  void work(int worker);

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_, idle_;
  std::deque<std::function<void(int)>> jobs_;
  int running_ = 0;
  bool stopping_ = false;
};

}  // namespace gpulab
