// The `count` best logits of a row, in the sampler's order (engine/src/Sampler.cpp "Better"):
// larger logit first, then lower id; NaN counts as -inf and -0 as +0. With them the host samples
// top-k (k < count) exactly as from the whole row (Sampler::sampleFromBest), so a sampled decode
// step copies count × 8 bytes instead of the 1 MB row and the host scans 65 entries, not 262144.
//
// Each entry becomes one 64-bit key that sorts ascending in that order: the high word is the
// logit's bits mapped to an unsigned order and inverted (larger logit, smaller key), the low
// word the id; keys are distinct. One launch: block b selects the best `count` keys of its slice
// of the row (blockSelectBest: a radix select of the count-th key, then a sort of the count keys
// below it) in windows of kWindow keys in shared memory (after each window the best `count` stay
// at the front and the next window fills the rest), writes them to the workspace, and the last
// block to finish (threadfence + atomic counter, as Argmax.cu) selects the best `count` of all
// blocks' keys the same way, writes them decoded into (logit, id) and resets the counter.
//
// Sizes: kWindow = 4096 keys (32 KB) per block; blocks = ceil(vocab / kWindow), at most
// kMergeKeys / count so that the merge fits its kMergeKeys (64 KB). Gemma's 262144-entry row:
// 64 blocks, one window each, a merge of 64 × 65 keys.
// Preconditions (checked): vocab in [1, 2^31 - 2], 1 <= count <= kTopKMaxCount, workspace large
// enough and 16-byte aligned, out non-null.
#include "TopK.h"

#include "CudaCommon.h"

namespace gemma::cuda {
namespace topkdetail {

constexpr int kThreads = 256;
constexpr int kWindow = 4096;
constexpr int kPerThread = kWindow / kThreads;  // a window's keys per thread
constexpr int kMergeKeys = 8192;
constexpr std::size_t kCounterBytes = 16;
constexpr unsigned long long kWorstKey = ~0ull;  // worse than every real key (padding)

__device__ __forceinline__ unsigned long long rankKey(float v, std::int64_t id) {
    if (!(v > -INFINITY)) v = -INFINITY;  // NaN and -inf
    if (v == 0.0f) v = 0.0f;              // -0 ranks with +0
    const unsigned bits = __float_as_uint(v);
    const unsigned ordered = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);  // ascending with v
    return (static_cast<unsigned long long>(~ordered) << 32) | static_cast<unsigned>(id);
}

__device__ __forceinline__ TopKEntry decodeKey(unsigned long long key) {
    const unsigned ordered = ~static_cast<unsigned>(key >> 32);
    const unsigned bits = (ordered & 0x80000000u) ? (ordered & 0x7FFFFFFFu) : ~ordered;
    return {__uint_as_float(bits), static_cast<std::int32_t>(key & 0xFFFFFFFFu)};
}

// Ascending bitonic sort of keys[0, n), n a power of two <= 2·blockDim (one compare-exchange per
// thread and stage); all threads of the block take part.
__device__ void bitonicSortSmall(unsigned long long* keys, int n) {
    for (int k = 2; k <= n; k <<= 1) {
        for (int j = k >> 1; j > 0; j >>= 1) {
            const int i = static_cast<int>(threadIdx.x);
            const int partner = i ^ j;
            if (i < n && partner > i) {
                const unsigned long long a = keys[i], b = keys[partner];
                if ((a > b) == ((i & k) == 0)) {
                    keys[i] = b;
                    keys[partner] = a;
                }
            }
            __syncthreads();
        }
    }
}

// Shared state of blockSelectBest.
struct SelectScratch {
    unsigned hist[256];
    unsigned long long prefix;
    int need;
    int taken;
};

// best[0, count) = the count smallest of keys[0, n), ascending (n a multiple of blockDim; only
// the padding, kWorstKey, repeats). Sorting all n keys costs log²(n) block barriers (a bitonic
// sort of 4096 keys took ~70 µs per block on an H200, and of the 64 × 65-key merge ~150 µs);
// instead the count-th smallest key is found digit by digit (8 passes of an 8-bit histogram over
// the keys that share the digits found so far; lanes with equal digits add once through
// __match_any_sync), the keys below it are gathered, and only those count keys are sorted.
__device__ void blockSelectBest(const unsigned long long* keys, int n, int count, unsigned long long* best, SelectScratch& s) {
    const int lane = threadIdx.x & 31;
    if (threadIdx.x == 0) {
        s.prefix = 0;
        s.need = count;
        s.taken = 0;
    }
    unsigned long long mask = 0;
    for (int shift = 56; shift >= 0; shift -= 8) {
        for (int b = threadIdx.x; b < 256; b += blockDim.x) s.hist[b] = 0;
        __syncthreads();
        const unsigned long long prefix = s.prefix;
        for (int i = threadIdx.x; i < n; i += blockDim.x) {  // n % blockDim == 0: whole warps
            const unsigned long long k = keys[i];
            const unsigned digit = (k & mask) == prefix ? static_cast<unsigned>(k >> shift) & 255u : 256u;
            const unsigned peers = __match_any_sync(0xffffffffu, digit);
            if (digit < 256u && lane == __ffs(peers) - 1) atomicAdd(&s.hist[digit], static_cast<unsigned>(__popc(peers)));
        }
        __syncthreads();
        if (threadIdx.x < 32) {  // the digit at which the running count reaches need
            // Read before the shuffles: no lane can then pass them while another still reads.
            const unsigned need = static_cast<unsigned>(s.need);
            unsigned local[8], sum = 0;
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                local[j] = s.hist[lane * 8 + j];
                sum += local[j];
            }
            unsigned inclusive = sum;
#pragma unroll
            for (int off = 1; off < 32; off <<= 1) {
                const unsigned other = __shfl_up_sync(0xffffffffu, inclusive, off);
                if (lane >= off) inclusive += other;
            }
            const unsigned before = inclusive - sum;
            const bool mine = before < need && need <= inclusive;
            __syncwarp();
            if (mine) {  // exactly one lane
                unsigned running = before;
                int digit = 0;
                while (running + local[digit] < need) running += local[digit++];
                s.prefix = prefix | (static_cast<unsigned long long>(lane * 8 + digit) << shift);
                s.need = static_cast<int>(need - running);
            }
        }
        mask |= 255ull << shift;
        __syncthreads();
    }
    // The keys below the threshold (count − need of them), then the threshold in the rest (once
    // for a real key; padding may fill several).
    const unsigned long long threshold = s.prefix;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const unsigned long long k = keys[i];
        if (k < threshold) best[atomicAdd(&s.taken, 1)] = k;
    }
    __syncthreads();
    const int below = s.taken;
    int size = 1;
    while (size < count) size <<= 1;
    for (int i = below + static_cast<int>(threadIdx.x); i < size; i += blockDim.x) best[i] = i < count ? threshold : kWorstKey;
    __syncthreads();
    bitonicSortSmall(best, size);
}

__global__ void __launch_bounds__(kThreads) topKKernel(const float* __restrict__ logits, std::int64_t vocab, int count,
                                                       unsigned long long* __restrict__ partial, int* counter,
                                                       TopKEntry* __restrict__ out) {
    extern __shared__ unsigned long long keys[];  // kMergeKeys; a window uses the first kWindow
    __shared__ unsigned long long best[kTopKMaxCount];
    __shared__ SelectScratch scratch;
    __shared__ bool isLast;
    gridDependencyWait();  // the logits come from the kernel before (PDL)
    const int blocks = gridDim.x;
    const std::int64_t per = (vocab + blocks - 1) / blocks;
    const std::int64_t begin = blockIdx.x * per;
    const std::int64_t end = begin + per < vocab ? begin + per : vocab;
    // Windows of kWindow keys: the best `count` so far, then as many new keys as fit.
    int kept = 0;
    std::int64_t base = begin;
    do {
        const std::int64_t left = end - base > 0 ? end - base : 0;
        const std::int64_t take = left < kWindow - kept ? left : kWindow - kept;
        // Every new logit of the window loaded before any is ranked, so a thread's kPerThread
        // loads cost one L2 round trip: loaded where they are stored, each behind the branch on
        // `kept`, they went out one at a time.
        float v[kPerThread];
#pragma unroll
        for (int j = 0; j < kPerThread; ++j) {
            const int i = static_cast<int>(threadIdx.x) + j * kThreads;
            v[j] = i >= kept && i - kept < take ? logits[base + (i - kept)] : 0.0f;
        }
#pragma unroll
        for (int j = 0; j < kPerThread; ++j) {
            const int i = static_cast<int>(threadIdx.x) + j * kThreads;
            if (i < kept) keys[i] = best[i];
            else keys[i] = i - kept < take ? rankKey(v[j], base + (i - kept)) : kWorstKey;
        }
        __syncthreads();
        blockSelectBest(keys, kWindow, count, best, scratch);
        kept = count;
        base += take;
    } while (base < end);
    for (int i = threadIdx.x; i < count; i += kThreads) partial[static_cast<std::int64_t>(blockIdx.x) * count + i] = best[i];
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) isLast = atomicAdd(counter, 1) == blocks - 1;
    __syncthreads();
    if (!isLast) return;
    __threadfence();
    const int total = blocks * count;
    const int n = (total + kThreads - 1) / kThreads * kThreads;
    for (int i = threadIdx.x; i < n; i += kThreads) keys[i] = i < total ? __ldcg(partial + i) : kWorstKey;
    __syncthreads();
    blockSelectBest(keys, n, count, best, scratch);
    const int wanted = static_cast<std::int64_t>(count) < vocab ? count : static_cast<int>(vocab);
    for (int i = threadIdx.x; i < wanted; i += kThreads) out[i] = decodeKey(best[i]);
    if (threadIdx.x == 0) *counter = 0;
}

inline int blockCount(std::int64_t vocab, int count) {
    std::int64_t b = (vocab + kWindow - 1) / kWindow;
    const std::int64_t cap = kMergeKeys / count;
    if (b > cap) b = cap;
    if (b < 1) b = 1;
    return static_cast<int>(b);
}

}  // namespace topkdetail

std::size_t topKWorkspaceBytes(std::int64_t vocab, int count) {
    if (vocab < 1 || count < 1 || count > kTopKMaxCount) return 0;
    return topkdetail::kCounterBytes + sizeof(unsigned long long) * static_cast<std::size_t>(topkdetail::blockCount(vocab, count)) * count;
}

std::size_t topKSharedBytes() { return sizeof(unsigned long long) * topkdetail::kMergeKeys; }

KernelStatus launchTopK(const TopKParams& p, cudaStream_t stream) {
    using namespace topkdetail;
    if (!p.logits || !p.out || !p.workspace) return KernelStatus::InvalidArgument;
    if (p.vocab < 1 || p.vocab > 0x7ffffffe || p.count < 1 || p.count > kTopKMaxCount) return KernelStatus::InvalidArgument;
    if (p.workspaceBytes < topKWorkspaceBytes(p.vocab, p.count) || !aligned16(p.workspace)) return KernelStatus::InvalidArgument;
    static_assert(kMergeKeys / kTopKMaxCount >= 1 && kWindow > kTopKMaxCount, "window and merge sizes");
    const std::size_t smem = topKSharedBytes();
    thread_local int raisedDevice = -1;
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return KernelStatus::LaunchFailed;
    if (raisedDevice != device) {
        if (cudaFuncSetAttribute(topKKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)) != cudaSuccess)
            return KernelStatus::LaunchFailed;
        raisedDevice = device;
    }
    int* counter = static_cast<int*>(p.workspace);
    auto* partial = reinterpret_cast<unsigned long long*>(static_cast<unsigned char*>(p.workspace) + kCounterBytes);
    const int blocks = blockCount(p.vocab, p.count);
    return launchStatus(launchKernel(topKKernel, dim3(static_cast<unsigned>(blocks)), dim3(kThreads), smem, stream,
                                     p.programmaticLaunch, p.logits, p.vocab, p.count, partial, counter, p.out));
}

}  // namespace gemma::cuda
