// core/thread_pool.h — a persistent pool of worker threads for data-parallel loops.
//
// Owns n-1 worker threads (the calling thread is the n-th) that run `parallel_for` jobs:
// the task range [0, n_tasks) is cut into chunks that every participating thread claims
// dynamically with one compare-and-swap each, so a worker that the OS has descheduled on a
// loaded machine simply claims nothing and the others absorb its share.
//
// Cost model: a dispatch to spinning workers costs well under a microsecond (a store the
// workers see through the cache, then one CAS per chunk and one atomic add per finished
// chunk). Workers spin for kSpinMicros (~100 us) after a job before sleeping on a futex
// (std::atomic::wait); waking a sleeping worker costs a syscall plus the wake-up latency
// (~5-50 us), paid only after an idle gap. The caller only waits for chunks that were
// claimed, never for a worker to show up. A parallel_for from inside a job runs serially on
// the calling thread (with its thread_idx); callers on different threads take turns.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace hs {

class ThreadPool {
 public:
  // n_threads counts the calling thread; 0 picks std::thread::hardware_concurrency().
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int n_threads() const { return n_threads_; }

  // Runs fn(begin, end, thread_idx) over [0, n_tasks) in chunks of `chunk` tasks (the last
  // may be shorter; chunk <= 0 picks ~4 chunks per thread). thread_idx is in
  // [0, n_threads()) and is stable within one chunk (use it to index per-thread scratch).
  // Every task index is covered exactly once; returns when all chunks are done, with their
  // writes visible to the caller. fn must not throw.
  template <typename F>
  void parallel_for(int64_t n_tasks, int64_t chunk, F&& fn) {
    using Fn = std::remove_reference_t<F>;
    run(n_tasks, chunk,
        [](void* ctx, int64_t b, int64_t e, int t) { (*static_cast<Fn*>(ctx))(b, e, t); },
        const_cast<void*>(static_cast<const void*>(&fn)));
  }
  template <typename F>
  void parallel_for(int64_t n_tasks, F&& fn) {
    parallel_for(n_tasks, 0, std::forward<F>(fn));
  }

 private:
  using ChunkFn = void (*)(void* ctx, int64_t begin, int64_t end, int thread_idx);

  void run(int64_t n_tasks, int64_t chunk, ChunkFn fn, void* ctx);
  void worker_main(int thread_idx);
  // Claims and runs chunks of the job tagged `tag` until none are left; returns how many
  // chunks this thread ran.
  int64_t work_on(uint64_t tag, int thread_idx);

  int n_threads_ = 1;
  std::vector<std::thread> workers_;  // [n_threads - 1]
  std::mutex dispatch_mu_;            // one dispatching thread at a time

  // The claim word: [tag:24][n_chunks:20][next_chunk:20]. A worker claims chunk `next` with
  // a CAS that also checks the tag, so a late worker can never claim a chunk of a newer job
  // with an old job's parameters.
  alignas(64) std::atomic<uint64_t> claim_{0};
  // Job parameters, valid while a chunk of the job is claimed and not finished. Atomics
  // (relaxed) only so that a late reader racing a new job is not a data race; every use is
  // ordered by claim_.
  alignas(64) std::atomic<ChunkFn> fn_{nullptr};
  std::atomic<void*> ctx_{nullptr};
  std::atomic<int64_t> n_tasks_{0};
  std::atomic<int64_t> chunk_{1};
  alignas(64) std::atomic<int64_t> done_chunks_{0};
  alignas(64) std::atomic<uint32_t> generation_{0};  // bumped per job; workers wait on it
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
  uint32_t tag_ = 0;  // dispatcher-only: tag of the last job
};

}  // namespace hs
