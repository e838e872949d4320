// core/thread_pool.cpp — the dispatch protocol behind core/thread_pool.h.
//
// A job is published by writing its parameters (relaxed), resetting done_chunks_, then
// storing the claim word {tag, n_chunks, next = 0} with release and bumping generation_.
// Workers spin on generation_ (pause loop, then futex wait), and claim chunks with a CAS on
// the claim word; the caller claims chunks too and finally spins until done_chunks_ reaches
// n_chunks. Cost: see the header; no allocation per job.
#include "core/thread_pool.h"

#include <algorithm>
#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace hs {
namespace {

constexpr int kSpinMicros = 100;        // spin this long after a job before sleeping
constexpr uint64_t kFieldBits = 20;      // bits of n_chunks and of next_chunk
constexpr uint64_t kFieldMask = (uint64_t{1} << kFieldBits) - 1;
constexpr int64_t kMaxChunks = static_cast<int64_t>(kFieldMask);
constexpr uint32_t kTagMask = (1u << 24) - 1;

thread_local bool t_in_pool_job = false;  // set while this thread runs a chunk
thread_local int t_thread_idx = 0;        // its thread_idx, for nested calls

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

inline uint64_t pack_claim(uint64_t tag, uint64_t n_chunks, uint64_t next) {
  return (tag << (2 * kFieldBits)) | (n_chunks << kFieldBits) | next;
}

}  // namespace

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = static_cast<int>(std::thread::hardware_concurrency());
  n_threads_ = std::max(1, n_threads);
  workers_.reserve(static_cast<size_t>(n_threads_ - 1));
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_main(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_seq_cst);
  generation_.fetch_add(1, std::memory_order_seq_cst);
  generation_.notify_all();
  for (auto& w : workers_) w.join();
}

int64_t ThreadPool::work_on(uint64_t tag, int thread_idx) {
  int64_t ran = 0;
  uint64_t c = claim_.load(std::memory_order_acquire);
  for (;;) {
    if ((c >> (2 * kFieldBits)) != tag) break;
    const uint64_t n_chunks = (c >> kFieldBits) & kFieldMask;
    const uint64_t next = c & kFieldMask;
    if (next >= n_chunks) break;
    if (!claim_.compare_exchange_weak(c, c + 1, std::memory_order_acq_rel,
                                      std::memory_order_acquire)) {
      continue;  // c was reloaded
    }
    // Chunk `next` of job `tag` is ours; the job cannot finish before we report it, so
    // its parameters are stable.
    const ChunkFn fn = fn_.load(std::memory_order_relaxed);
    void* ctx = ctx_.load(std::memory_order_relaxed);
    const int64_t n_tasks = n_tasks_.load(std::memory_order_relaxed);
    const int64_t chunk = chunk_.load(std::memory_order_relaxed);
    const int64_t begin = static_cast<int64_t>(next) * chunk;
    const int64_t end = std::min(n_tasks, begin + chunk);
    t_in_pool_job = true;
    t_thread_idx = thread_idx;
    fn(ctx, begin, end, thread_idx);
    t_in_pool_job = false;
    ++ran;
    c = claim_.load(std::memory_order_acquire);
  }
  return ran;
}

void ThreadPool::worker_main(int thread_idx) {
  // The generation at construction, not a fresh load: a thread that starts late must still
  // see the jobs (or the stop) published before it ran.
  uint32_t seen = 0;
  for (;;) {
    // Wait for a new generation: spin first, then sleep on the futex.
    uint32_t g = generation_.load(std::memory_order_acquire);
    if (g == seen) {
      const auto deadline =
          std::chrono::steady_clock::now() + std::chrono::microseconds(kSpinMicros);
      for (int i = 0;; ++i) {
        cpu_relax();
        g = generation_.load(std::memory_order_acquire);
        if (g != seen) break;
        if ((i & 63) == 63 && std::chrono::steady_clock::now() > deadline) break;
      }
      while (g == seen) {
        // seq_cst increment, then a wait that rechecks the value: pairs with the
        // dispatcher's seq_cst store-then-load of sleepers_ so a wake-up is never lost.
        sleepers_.fetch_add(1, std::memory_order_seq_cst);
        generation_.wait(seen, std::memory_order_seq_cst);
        sleepers_.fetch_sub(1, std::memory_order_seq_cst);
        g = generation_.load(std::memory_order_acquire);
      }
    }
    seen = g;
    if (stop_.load(std::memory_order_acquire)) return;
    const uint64_t c = claim_.load(std::memory_order_acquire);
    const int64_t ran = work_on(c >> (2 * kFieldBits), thread_idx);
    if (ran > 0) done_chunks_.fetch_add(ran, std::memory_order_release);
  }
}

void ThreadPool::run(int64_t n_tasks, int64_t chunk, ChunkFn fn, void* ctx) {
  if (n_tasks <= 0) return;
  if (chunk <= 0) chunk = std::max<int64_t>(1, (n_tasks + 4 * n_threads_ - 1) / (4 * n_threads_));
  // Keep the chunk count within the claim word's field.
  chunk = std::max(chunk, (n_tasks + kMaxChunks - 1) / kMaxChunks);
  const int64_t n_chunks = (n_tasks + chunk - 1) / chunk;

  if (n_threads_ == 1 || n_chunks == 1 || t_in_pool_job) {
    // Serial: no workers, nothing to split, or a nested call (keeps the caller's index).
    const int idx = t_in_pool_job ? t_thread_idx : 0;
    for (int64_t b = 0; b < n_tasks; b += chunk) fn(ctx, b, std::min(n_tasks, b + chunk), idx);
    return;
  }
  // Callers on different threads take turns (a job owns the pool's indices 0..n-1).
  std::lock_guard<std::mutex> lock(dispatch_mu_);

  tag_ = (tag_ + 1) & kTagMask;
  fn_.store(fn, std::memory_order_relaxed);
  ctx_.store(ctx, std::memory_order_relaxed);
  n_tasks_.store(n_tasks, std::memory_order_relaxed);
  chunk_.store(chunk, std::memory_order_relaxed);
  done_chunks_.store(0, std::memory_order_relaxed);
  claim_.store(pack_claim(tag_, static_cast<uint64_t>(n_chunks), 0), std::memory_order_seq_cst);
  generation_.fetch_add(1, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) generation_.notify_all();

  const int64_t ran = work_on(tag_, 0);
  if (ran > 0) done_chunks_.fetch_add(ran, std::memory_order_release);
  for (int i = 0; done_chunks_.load(std::memory_order_acquire) < n_chunks; ++i) {
    cpu_relax();
    if (i > 4096) std::this_thread::yield();  // a worker holding a chunk was preempted
  }
}

}  // namespace hs
