// A fixed pool of worker threads with one operation: split [0, count) into contiguous ranges and
// run them in parallel, returning when all are done. The CPU backend uses it for linears.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace gemma {

class ThreadPool {
public:
    explicit ThreadPool(unsigned threads = 0);  // 0: hardware concurrency (capped at 32)
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    unsigned size() const { return static_cast<unsigned>(workers_.size()) + 1; }
    // Calls body(begin, end) on disjoint ranges covering [0, count); the caller runs one range.
    void parallelFor(std::int64_t count, const std::function<void(std::int64_t, std::int64_t)>& body);

private:
    void workerLoop(unsigned index);

    std::vector<std::thread> workers_;
    std::mutex mutex_;
    std::condition_variable wake_, done_;
    const std::function<void(std::int64_t, std::int64_t)>* body_ = nullptr;
    std::int64_t count_ = 0;
    std::uint64_t generation_ = 0;
    unsigned pending_ = 0;
    bool stopping_ = false;
};

}  // namespace gemma
