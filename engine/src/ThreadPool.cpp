#include "ThreadPool.h"

#include <algorithm>

namespace gemma {

ThreadPool::ThreadPool(unsigned threads) {
    if (threads == 0) threads = std::max(1u, std::min(32u, std::thread::hardware_concurrency()));
    for (unsigned i = 1; i < threads; ++i) workers_.emplace_back([this, i] { workerLoop(i); });
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard lock(mutex_);
        stopping_ = true;
    }
    wake_.notify_all();
    for (auto& worker : workers_) worker.join();
}

namespace {
std::pair<std::int64_t, std::int64_t> rangeOf(std::int64_t count, unsigned parts, unsigned index) {
    const std::int64_t begin = count * index / parts;
    const std::int64_t end = count * (index + 1) / parts;
    return {begin, end};
}
}  // namespace

void ThreadPool::parallelFor(std::int64_t count, const std::function<void(std::int64_t, std::int64_t)>& body) {
    if (count <= 0) return;
    if (workers_.empty() || count == 1) {
        body(0, count);
        return;
    }
    {
        std::lock_guard lock(mutex_);
        body_ = &body;
        count_ = count;
        pending_ = static_cast<unsigned>(workers_.size());
        ++generation_;
    }
    wake_.notify_all();
    const auto [begin, end] = rangeOf(count, size(), 0);
    if (begin < end) body(begin, end);
    std::unique_lock lock(mutex_);
    done_.wait(lock, [this] { return pending_ == 0; });
    body_ = nullptr;
}

void ThreadPool::workerLoop(unsigned index) {
    std::uint64_t seen = 0;
    for (;;) {
        const std::function<void(std::int64_t, std::int64_t)>* body;
        std::int64_t count;
        {
            std::unique_lock lock(mutex_);
            wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
            if (stopping_) return;
            seen = generation_;
            body = body_;
            count = count_;
        }
        const auto [begin, end] = rangeOf(count, size(), index);
        if (begin < end) (*body)(begin, end);
        {
            std::lock_guard lock(mutex_);
            if (--pending_ == 0) done_.notify_one();
        }
    }
}

}  // namespace gemma
