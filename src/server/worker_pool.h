// server/worker_pool.h — a fixed pool of threads for the blocking part of a request (JSON
// parsing, the chat template, tokenization, submission to the engine), so that the io threads
// of the HTTP transport never wait on it.
//
// Tasks run in submission order on `n` threads; the queue is unbounded here because its
// length is bounded upstream (a connection has at most one request in a handler, and the
// transport caps connections). Cost: one mutex push + one wake per task.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace hs::server {

class WorkerPool {
 public:
  explicit WorkerPool(int n);
  ~WorkerPool();  // join()
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Queues `fn`; false (and `fn` not run) once join() has begun.
  bool post(std::function<void()> fn);
  // Runs what is queued, then stops the threads. Idempotent.
  void join();

 private:
  void run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> q_;
  bool closing_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace hs::server
