// server/worker_pool.cpp — see worker_pool.h.
#include "server/worker_pool.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <exception>

namespace hs::server {

WorkerPool::WorkerPool(int n) {
  for (int i = 0; i < std::max(1, n); ++i) threads_.emplace_back([this] { run(); });
}

WorkerPool::~WorkerPool() { join(); }

bool WorkerPool::post(std::function<void()> fn) {
  {
    std::lock_guard lk(mu_);
    if (closing_) return false;
    q_.push_back(std::move(fn));
  }
  cv_.notify_one();
  return true;
}

void WorkerPool::join() {
  {
    std::lock_guard lk(mu_);
    closing_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_)
    if (t.joinable()) t.join();
  threads_.clear();
}

void WorkerPool::run() {
  for (;;) {
    std::function<void()> fn;
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return closing_ || !q_.empty(); });
      if (q_.empty()) return;  // closing and drained
      fn = std::move(q_.front());
      q_.pop_front();
    }
    try {
      fn();
    } catch (const std::exception& e) {
      spdlog::error("HTTP worker task failed: {}", e.what());
    } catch (...) {
      spdlog::error("HTTP worker task failed");
    }
  }
}

}  // namespace hs::server
