// The engine's public API: the only header the app and the command-line tools need.
//
// Threading contract: an Engine is used from one thread at a time (the app's worker thread),
// except cancel(), which any thread may call at any time. Callbacks run on the calling thread.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "gemma/Status.h"

namespace gemma {

enum class Device { Auto, Cpu, Cuda };
const char* deviceName(Device device);

// Where a decode step's time goes (PERF.md). `Gap` is wall time minus the sum of the others.
enum class Bucket : int { Fp4Matvec = 0, Attention, NormElementwise, LmHead, Sampling, Gap, Count };
inline constexpr int kBucketCount = static_cast<int>(Bucket::Count);
const char* bucketName(Bucket bucket);

struct StepStats {
    int position = 0;                 // absolute position of the token this step consumed
    int positions = 1;                // positions the step ran: the prompt length for the first
                                      // token of a reply (its step is the prefill), 1 when decoding
    double wallMs = 0.0;              // host wall time of the whole step
    std::array<double, kBucketCount> bucketMs{};  // per-bucket time; Gap derived
    std::array<int, kBucketCount> launches{};     // kernels (GPU) or op calls (CPU) per bucket
    bool graph = false;               // the step ran as one CUDA graph replay
    bool instrumented = false;        // buckets were timed (costs time; see PERFORMANCE.md)
    // How: from the GPU's kernel timeline of the step as it runs (CUDA with libcupti: graph and
    // programmatic overlap included, each instant charged once, gap = the time no kernel ran), or
    // from event pairs around direct launches (no graph; the gap then includes their cost).
    bool kernelTimeline = false;
    // Host time the timing itself took inside the step (switching the recorder, reading the
    // timeline), left out of wallMs so the step's wall and gap are what an untimed step pays.
    double instrumentationMs = 0.0;
};

struct SamplingParams {
    bool greedy = false;
    float temperature = 1.0f;  // Gemma 4's recommended defaults (GEMMA4.md §7)
    int topK = 64;             // 0 disables
    float topP = 0.95f;        // 1 disables
    float minP = 0.0f;         // 0 disables
    float repeatPenalty = 1.0f;  // 1 disables; applied to tokens seen in prompt and output
    std::uint64_t seed = 0;
};

enum class Role { System, User, Model };

struct ChatMessage {
    Role role = Role::User;
    std::string text;
};

struct GenerationRequest {
    // Exactly one of the two: chat messages are rendered with the model's turn format (and a
    // generation prompt); rawTokens are fed as they are, with no template and no BOS added.
    std::vector<ChatMessage> messages;
    std::vector<std::int32_t> rawTokens;
    SamplingParams sampling;
    int maxNewTokens = 256;
    bool stopAtEndOfTurn = true;  // stop on EOS / end-of-turn tokens
    // Optional: receives the logits row (vocab floats) of every prompt position and every
    // generated token, in order. Used by parity tests and --dump-logits.
    std::function<void(std::int32_t position, const float* logits, std::int32_t vocab)> onLogits;
    // Decode steps whose buckets are timed: every Nth after the prefill (the first among them);
    // 1 = every step, 0 = none (the prefill step is always timed). A timed step launches its
    // kernels one by one with an event pair around each (on the H200 ≈ 30 % slower than a graph
    // replay, docs/PERFORMANCE.md); the others replay the CUDA graph and report wall time only
    // (StepStats::instrumented false). Greedy choices with no repetition penalty and no onLogits
    // are made on the GPU between the timed steps (no logits copied to the host).
    int instrumentEvery = 16;
};

struct TokenEvent {
    std::int32_t id = 0;
    std::string text;  // UTF-8 text this token completes (may be empty mid-character)
    StepStats step;
};

enum class StopReason { EndOfTurn, MaxTokens, ContextFull, Cancelled };
const char* stopReasonName(StopReason reason);

struct GenerationStats {
    int promptTokens = 0;
    int generatedTokens = 0;
    double prefillMs = 0.0;
    double timeToFirstTokenMs = 0.0;
    double decodeMs = 0.0;
    double decodeTokensPerSecond = 0.0;
    StopReason stopReason = StopReason::MaxTokens;
    std::vector<std::int32_t> tokens;  // generated ids
};

struct ModelInfo {
    std::string name;          // from the package (source folder name)
    std::string architecture;  // "gemma4_text"
    std::string backend;       // "cpu (fp32 reference)" or the GPU and its paths; refreshed after generate() and benchmarkDecode() (the decode graphs report their self-checks on first use)
    std::string quantization;  // "fp4-e2m1-g128 + fp8-e4m3 embedding" or "unquantized"
    int vocabSize = 0;
    int hiddenSize = 0;
    int layers = 0;
    int contextAllocation = 0;
    std::int64_t weightBytes = 0;         // bytes the decoder streams per token
    std::int64_t kvBytesPerPosition = 0;  // KV-cache bytes one position adds (non-shared layers, at their element types)
    bool hasTokenizer = true;             // false for synthetic benchmark packages (raw tokens only)
    std::string configJson;               // the package's resolved config (ModelConfig::fromJson reads it)
};

// Element type of the GPU KV cache (the CPU backend always uses f32):
//   F16 (the default): every layer's cache in fp16. The full layers' decode attention (the
//     tensor-core pieces) and the prefill's flash attention round K and V to fp16 when they stage
//     them, so an fp16 cache gives them the same bits for half the bytes they read; the sliding
//     layers' fp32 attention reads K and V rounded to 2^-11 relative. V is RMS-normalised and K
//     normalised before RoPE, so their values sit far inside fp16's range. Measured faster at
//     every context on an H100 (12b: +0.4 % short, +8.6 % at depth 32768; 31b +10.2 %, e4b +9.9 %
//     at depth) with the parity test's greedy tokens identical (docs/PERFORMANCE.md versions 40-41).
//   FullF16: the full-attention layers' caches in fp16, the sliding layers' in f32 (version 40's
//     default).
//   F32: every layer in f32: matches the CPU oracle and transformers to ~1e-5 of max|logit|.
//   Bf16: every layer in bf16: moved logits by up to 7.6 % of max|logit| on the (deliberately
//     peaked) golden models, over the 2e-2 parity budget (docs/KERNELS.md).
enum class KvCacheType { FullF16, F32, F16, Bf16 };

// Bytes of one KV-cache value of a layer on the CUDA backend (the CPU backend: 4).
constexpr int kvCacheElementBytes(KvCacheType type, bool slidingLayer) {
    switch (type) {
        case KvCacheType::F32: return 4;
        case KvCacheType::FullF16: return slidingLayer ? 4 : 2;
        default: return 2;
    }
}
// The command-line spelling of a type ("full-f16", "f32", "f16", "bf16"), and back (false: unknown).
const char* kvCacheTypeName(KvCacheType type);
bool parseKvCacheType(const std::string& text, KvCacheType& type);

// How the CUDA GEMM prefill feeds x (fp32) to its FP16 GEMMs: Split, x as FP16 hi + lo (two
// GEMMs per linear, x to ~2^-22); SplitDown, only the down projections split, every other linear
// takes x as one FP16 (~2^-12 relative, half the GEMM work there); Single, every linear one FP16.
enum class PrefillInput { Split, SplitDown, Single };

struct OpenOptions {
    Device device = Device::Auto;
    int contextAllocation = 4096;  // KV slots of full-attention layers
    KvCacheType kvCache = KvCacheType::F16;
    // Replay uninstrumented single-token decode steps as one CUDA graph, self-checked against direct
    // launches on first use (a mismatch turns it off and says why in the backend name).
    bool cudaGraph = true;
    // CUDA prefill: chunks of at least this many positions run as cuBLASLt FP16 GEMMs over weights
    // dequantized per layer (when cuBLASLt loads); shorter ones, and every decode step, run the FP4
    // matvec kernels. 0 = never use the GEMMs.
    int prefillGemmMinRows = 16;
    // CUDA GEMM prefill: positions per chunk (each chunk dequantizes every weight once, so longer
    // chunks dequantize less often; the sliding layers' KV rings and the prefill workspaces grow
    // with it). Between 32 and 8192; where the GPU's free memory does not hold the asked chunk's
    // rings and workspaces, the backend halves it (not below 256) before refusing. 2048: pp2048 on
    // the H200 +7 % over 1024 (docs/PERFORMANCE.md version 14).
    int gemmPrefillChunk = 2048;
    // CUDA GEMM prefill: SplitDown by default, half the GEMM work of Split outside the down
    // projections for a worst golden-model logit error of 1.8 % instead of 1.3 % (budget 2 %;
    // docs/PERFORMANCE.md version 14). Split for the most exact prefill.
    PrefillInput prefillInput = PrefillInput::SplitDown;
    // CUDA GEMM prefill: while one linear's GEMMs run, the next linear's FP16 copy is dequantized
    // on a second stream into a second weight buffer (the same results; one more buffer the size
    // of the largest gate|up pair). false: one buffer, dequantized just before its GEMMs.
    bool prefillDequantizeAhead = true;
    // CUDA: launch the decode step's kernels (FP4 matvecs, norms, q/k/v + RoPE, attention,
    // embedding gathers, PLE, lm_head) with programmatic dependent launch, so each one's launch and
    // prologue overlap the kernel before it (the matvecs also prefetch their weights). Applied on
    // sm_90+ only (ignored below); on the H200 the matvecs alone made the decode step 8.7 % faster
    // (docs/PERFORMANCE.md, version 3).
    bool programmaticLaunch = true;
    // CUDA: batch-1 FP4 matvecs feed x to an int8 mma as integers per 128-input group (to 2^-22
    // of the group's max since version 24; exact int32 sums per weight group; on the H200 15–25 %
    // faster than fp16 x on the large shapes and a 4–11× smaller logit error against the CPU
    // backend, docs/PERFORMANCE.md version 4). false: x as fp16 hi + lo in an fp16 mma, the
    // earlier form (comparisons).
    bool integerMatvec = true;
    // CUDA: FP4 weights are rearranged on the GPU at load into the tiled layout
    // (kernels/include/kernels/Fp4Tiled.h: each 16-row × 128-input block contiguous in the order
    // the batch-1 matvec's lanes read it; its code words kept as stored codes, version 27), the
    // decode matvecs 2–18 % faster per shape on the H200 (docs/PERFORMANCE.md version 5) and the
    // decode step 1.9 % more (version 27); same results bit for bit. false: the row layout
    // (comparisons).
    bool tiledWeights = true;
    // CUDA: a decode step's attention per layer is one launch: the q/k/v norm + RoPE + KV-cache
    // write and the split-K merge run inside the split kernel (AttentionDecode.cu, "Fusions"; same
    // results bit for bit, docs/PERFORMANCE.md version 6). false: three launches (comparisons).
    bool fusedAttention = true;
    // CUDA: a decode step's residual norms (post-attention norm + add + pre-feedforward norm, and
    // post-feedforward norm + add + layer scalar + the next layer's input norm) run inside the
    // matvec that consumes them (Fp4MatvecParams::inputNorm): no norm kernels between the layers'
    // matvecs (docs/PERFORMANCE.md version 7). false: separate norm kernels (comparisons).
    bool fusedNorms = true;
    // CUDA: the decode attention of full layers (every preset's, since fuseFullAttention is off by
    // default) runs its split pieces on tensor cores, the prefill's
    // flash-attention kernel over pieces of the band (AttentionDecodeParams::tensorCores: q, K, V and
    // P rounded to fp16, fp32 softmax; ~1e-3 of max|out|, like the prefill's attention).
    // docs/PERFORMANCE.md version 8. false: the fp32 CUDA-core split kernel (comparisons).
    bool tensorCoreAttention = true;
    // CUDA (sm_90+): the fused decode attention of sliding layers runs as thread-block clusters,
    // one per KV head, whose blocks merge their pieces through distributed shared memory instead
    // of global partials and a last-block merge (AttentionDecodeParams::cluster; fp32, another
    // summation order: within fp32 rounding of the split kernel). docs/PERFORMANCE.md version 11.
    // false: the fused split kernel (comparisons).
    bool clusterAttention = true;
    // CUDA: fuseFullAttention true runs full layers with query groups of at most 4 (e4b's) on the
    // fused split kernel (fp32, one launch) instead of the tensor-core pieces every other full layer
    // runs on: exact to fp32 rounding, but e4b decodes 8.6 % slower that way on the H200
    // (docs/PERFORMANCE.md version 16 step 1), so it is off by default and kept for the exact
    // parity cases and comparisons. tensorCoreSlidingAttention sends the sliding layers' decode
    // attention to the tensor-core pieces instead of the cluster or fused forms (an experiment for
    // depth; lost at depth 32000 in version 16 step 1: the separate merges cost more than the
    // pieces save; with the fp16 cache too, version 43 step 4: 12b −2.6 % at depth 32768, −4.9 %
    // at a short context on an H100). Both choose among existing kernels.
    bool fuseFullAttention = false;
    bool tensorCoreSlidingAttention = false;
    // CUDA, cluster attention at head dim 256 with a group of 4 or 8 query heads per kv head
    // (e4b, e2b): two clusters per kv head, each over half the group (AttentionDecodeParams::
    // clusterHeadSplit, where kc::clusterHeadSplitPays; the same bits per head). e2b decodes 3 %
    // faster, e4b 1 % (docs/PERFORMANCE.md version 19); off: one cluster per kv head (comparisons).
    bool clusterAttentionHeadSplit = true;
    // CUDA (sm_90+): the decode's tensor-core attention pieces (full layers) stage their K/V tiles
    // with bulk copies issued by one warp (cp.async.bulk on mbarriers) instead of every thread's
    // 16-byte cp.async; the same bits. +1.2 % at a 32K depth on the H200's 12b (docs/PERFORMANCE.md
    // version 32). Prefill chunks keep cp.async either way: there the bulk copies cost 2 % (version
    // 33). false: cp.async (compute-sanitizer racecheck, which does not model the bulk copies'
    // mbarrier completion and reports their reads as hazards).
    bool bulkCopies = true;
    // CUDA, with clusterAttention: full layers with at most 8 query heads per kv head (e2b, e4b,
    // 31b) run their decode attention as the cluster form (one launch: norm + RoPE, attention,
    // merge) in steps whose band is at most this many keys, instead of the norm + RoPE kernel, the
    // tensor-core pieces and the merge kernel; longer bands keep those. The decode graphs then come
    // in two forms, each captured and self-checked on first use, and a greedy chain that crosses
    // the limit switches between them. 0 (default): never; N: up to N keys. Until version 50 the
    // default was 1536 / group keys (192 for e2b and 31b, 384 for e4b; faster on an H200 in
    // version 20); with the pieces as they are now, an H100 decodes faster at every band without
    // the clusters (e2b +1.5 %, e4b +0.3 to +0.7 %, 31b +0.6 to +0.8 % at positions 100-227;
    // docs/PERFORMANCE.md versions 49 and 50). Kept as an option for the comparison on other cards.
    int clusterFullAttentionKeys = 0;
    // CUDA: while the band is at most this many keys, the full layers' decode attention pieces
    // (tensor cores) are split for a band of this many keys instead of the cache's capacity: at
    // a 32K allocation and a short band the pieces otherwise launch 132 splits, most of them empty,
    // which occupy every SM. The step then has one more band form (its own graphs, captured and
    // self-checked on first use; a greedy chain crossing it runs as segments); allocations of at
    // most this many keys have no such form. -1 (default): kernels::kFullAttentionBandKeys (4096;
    // 12b at 32K decodes 2.1 % faster at positions 100-227, within 0.3 % of 4K, docs/
    // PERFORMANCE.md version 21 step 1); 0: never; N: up to N keys.
    int fullAttentionBandKeys = -1;
    // CUDA: where a decode step's attention runs on the tensor-core pieces (the full layers',
    // OpenOptions::tensorCoreAttention), the q/k/v norm + RoPE and the KV-cache write run inside
    // the pieces' launch (AttentionDecodeParams::fuseNormRope with tensorCores: every piece
    // normalises its query heads, the piece holding the position writes the cache row) instead of
    // in their own kernel before it: one launch less per full layer. The same logits bit for bit
    // (gpu_parity_tests, every golden); the 12b decodes 0.8 % faster on the H200 at positions
    // 100-227 (docs/PERFORMANCE.md version 21 step 3). false: the separate kernel (comparisons).
    bool fusedPiecesNormRope = true;
    // CUDA, with clusterAttention and programmaticLaunch: the cluster blocks load the first chunk
    // of the band's earlier positions before waiting for the q/k/v matvec (AttentionDecodeParams::
    // prefetchBand; those rows were written by earlier steps): depth 32K +1.5 %, short depths
    // +1 % on the H200 (docs/PERFORMANCE.md version 12). false: the whole band after the wait.
    bool attentionPrefetch = true;
    // CUDA: a decode step's lm_head (one row of logits) on a resident grid of 8-row warps,
    // launched as an ordinary kernel (Fp8LmHeadParams::persistent: the same logits, bit for bit;
    // 0.234 against 0.249 ms in the 12b step's kernel timeline, docs/PERFORMANCE.md version 15).
    // false: the one-shot grid of 4-row warps, launched programmatically like the other kernels.
    bool persistentLmHead = true;
    // CUDA: instrumented decode steps (GenerationRequest::instrumentEvery) take their buckets from
    // the GPU's kernel timeline of the normal graph-replayed step (CUPTI, loaded at run time;
    // docs/PERFORMANCE.md version 10) instead of event pairs around direct launches. Falls back
    // to event pairs when libcupti is missing or refuses (another profiler attached). Off by
    // default: once CUPTI is attached to the process (even paused) the untimed steps that talk to
    // the host every step measured slower (H200: host sampling −1.5 to −7 %, top-k sampling −1.5
    // to −5 %, the greedy chain ≈ −0.5 to −1.4 %).
    bool kernelTimeline = false;
};

struct MemoryEstimate {
    std::int64_t weightBytes = 0;
    std::int64_t kvCacheBytes = 0;
    std::int64_t workspaceBytes = 0;
    std::int64_t total() const { return weightBytes + kvCacheBytes + workspaceBytes; }
};

// Progress of long work: fraction in [0, 1] and a stage name. Return false to cancel.
using ProgressCallback = std::function<bool(double fraction, std::string_view stage)>;
// Called once per generated token; return false to stop generating.
using TokenCallback = std::function<bool(const TokenEvent& event)>;

// One point of an allocation sweep: the same positions decoded with a given KV allocation.
// Engine::benchmarkDecode runs the request twice, prefill included, and reports the second pass:
// the first (untimed, never traced) captures the step's graphs and pays other one-time costs.
struct DecodeBenchmarkRequest {
    int contextAllocation = 4096;
    int promptTokens = 100;   // context filled by a real prefill before the timed decode
    int decodeTokens = 128;
    bool instrumented = true;  // time each bucket (costs some speed; false gives plain tok/s)
    // Plain runs: copy each step's logits and choose on the host (the path sampling with a
    // temperature takes) instead of the device-side greedy chain (Backend::decodeGreedy).
    bool hostSampling = false;
    // Plain runs: draw each token with the default SamplingParams (temperature 1, top-k 64,
    // top-p 0.95, seed 0) from the backend's best entries (Backend::decodeBest: on the device for
    // CUDA), the path the app's default sampling takes. Takes precedence over hostSampling.
    bool topKSampling = false;
    // Plain greedy-chain runs: record the GPU's kernel timeline of the decode steps (CUDA with
    // libcupti: Backend::beginKernelTrace) and report per-token buckets from it in `traced`; the
    // steps run as in a plain run (one graph each, programmatic overlap), at the tracer's cost
    // (compare tokensPerSecond with an untraced run). The warm pass (below) is never traced.
    bool traced = false;
};
// Per token of a traced run: bucketMs and launches from the kernel timeline, Gap = wall per token
// − the union of the kernels' intervals per token (the time no kernel of the step ran).
// `kernels` splits busyMs by kernel (its name with template arguments), largest share first.
struct TracedKernel {
    std::string name;
    double ms = 0.0;          // charged per token, by the buckets' rule (Σ ms == busyMs)
    double launches = 0.0;    // per token (a mean)
    double meanUs = 0.0;      // one launch's own start-to-end time, overlap with neighbours included
};
// One position of the step's kernel sequence, averaged over the traced steps: times in µs after
// the step's first kernel started; chargedUs by the buckets' rule.
struct TracedPosition {
    std::string name;
    double startUs = 0.0;
    double endUs = 0.0;
    double chargedUs = 0.0;
};
struct TracedBuckets {
    std::array<double, kBucketCount> bucketMs{};
    std::array<double, kBucketCount> launches{};  // kernels per token (a mean)
    double busyMs = 0.0;
    int unknownKernels = 0;  // kernels no bucket claims (counted in norm_elementwise)
    std::vector<TracedKernel> kernels;
    // The step as a sequence of launches, one entry per position; empty when the traced steps
    // did not all run the same sequence (different graph forms, or kernels outside the steps).
    std::vector<TracedPosition> sequence;
};
struct DecodeBenchmarkResult {
    int contextAllocation = 0;
    double tokensPerSecond = 0.0;
    double msPerToken = 0.0;   // median-free mean over the decode steps (wall time)
    double prefillMs = 0.0;    // time of the prefill of promptTokens
    std::vector<StepStats> steps;
    bool traced = false;  // `trace` holds the traced run's buckets
    TracedBuckets trace;
};

class Engine {
public:
    virtual ~Engine() = default;

    // Opens a Gemma Desk package (made by gemma-quantize). Never throws; a bad file, an
    // unsupported model or too little memory comes back as a Status with a message.
    static Expected<std::unique_ptr<Engine>> open(const std::filesystem::path& package,
                                                  const OpenOptions& options,
                                                  const ProgressCallback& progress = {});
    // What open() would allocate, read from the package header alone.
    static Expected<MemoryEstimate> estimateMemory(const std::filesystem::path& package,
                                                   const OpenOptions& options);

    virtual const ModelInfo& info() const = 0;

    // Runs one request from an empty context. Cancellation (cancel() or onToken returning false)
    // ends with StopReason::Cancelled and the tokens produced so far.
    virtual Expected<GenerationStats> generate(const GenerationRequest& request,
                                               const TokenCallback& onToken) = 0;

    // Decodes promptTokens + decodeTokens synthetic positions with the given KV allocation and
    // reports the decode speed; the engine's own allocation is restored afterwards.
    virtual Expected<DecodeBenchmarkResult> benchmarkDecode(const DecodeBenchmarkRequest& request,
                                                            const ProgressCallback& progress) = 0;

    // The read bandwidth of the memory the weights stream from (GPU memory for the CUDA backend,
    // host memory for the CPU backend), measured now with a streaming read of a buffer well past
    // the caches; median of five passes, in GB/s. The ceiling decode speed is judged against
    // (PERF.md). Takes well under a second.
    virtual Expected<double> measureReadBandwidth() = 0;

    // Thread-safe: asks a running generate()/benchmarkDecode() to stop at the next token.
    void cancel() { cancelRequested_.store(true, std::memory_order_relaxed); }

    // Tokenizer access for the app (prompt token counts) and tools.
    virtual std::vector<std::int32_t> tokenizeChat(const std::vector<ChatMessage>& messages) const = 0;
    virtual std::string detokenize(const std::vector<std::int32_t>& ids) const = 0;

protected:
    bool cancelRequested() const { return cancelRequested_.load(std::memory_order_relaxed); }
    void clearCancel() { cancelRequested_.store(false, std::memory_order_relaxed); }

private:
    std::atomic<bool> cancelRequested_{false};
};

// Version of the engine library, e.g. "0.1.0".
const char* engineVersion();

}  // namespace gemma
