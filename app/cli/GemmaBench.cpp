// gemma-bench: decode and prefill speed against the bandwidth ceiling measured in the same run
// (PERF.md). Presets build random-weight packages of a real geometry; --model runs any package.
// Output: a markdown table in llama-bench's spirit on stdout, and JSON (docs/bench/SCHEMA.md).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <unistd.h>

#include "BenchCeilings.h"
#include "CommandLine.h"
#include "gemma/Config.h"
#include "gemma/Engine.h"
#include "gemma/Quantize.h"

namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;

std::vector<int> parseList(const std::string& text, std::string& error) {
    std::vector<int> values;
    std::stringstream stream(text);
    std::string item;
    while (std::getline(stream, item, ',')) {
        char* end = nullptr;
        const long v = std::strtol(item.c_str(), &end, 10);
        if (item.empty() || *end != '\0' || v < 0 || v > (1 << 20)) {
            error = "bad list entry '" + item + "'";
            return {};
        }
        values.push_back(static_cast<int>(v));
    }
    return values;
}

// Bytes a decode step at position p reads (PERF.md): decoder weights + lm_head (ModelInfo),
// one embedding row, and the live KV band of every non-shared layer.
double bytesPerToken(const gemma::ModelInfo& info, const gemma::ModelConfig& config, int position, gemma::KvCacheType kvCache) {
    double bytes = static_cast<double>(info.weightBytes) + config.hiddenSize + 4.0;
    for (const auto& g : config.layers) {
        if (g.kvShared) continue;
        const bool sliding = g.type == gemma::LayerType::Sliding;
        const int live = sliding ? std::min(position + 1, config.slidingWindow) : position + 1;
        bytes += 2.0 * live * g.kvHeads * g.headDim * gemma::kvCacheElementBytes(kvCache, sliding);
    }
    return bytes;
}

// Multiply-adds per token of every linear and the lm_head (for prefill TFLOP/s).
double linearMacsPerToken(const gemma::ModelConfig& c) {
    double macs = 0.0;
    const double H = c.hiddenSize, P = c.hiddenSizePerLayerInput;
    for (const auto& g : c.layers) {
        const double q = static_cast<double>(c.numHeads) * g.headDim, kv = static_cast<double>(g.kvHeads) * g.headDim;
        macs += 2.0 * q * H;  // q and o
        if (!g.kvShared) macs += kv * H * (g.hasValueProjection ? 2.0 : 1.0);
        macs += 3.0 * g.intermediateSize * H;
        if (P > 0) macs += 2.0 * P * H;
    }
    if (P > 0) macs += c.numLayers * P * H;
    return macs;
}

struct Row {
    std::string test;
    int allocation = 0, depth = 0;
    double tokensPerSecond = 0.0, msPerToken = 0.0, gbs = 0.0, percent = 0.0;
    bool prefill = false;  // percent is then of the BF16 GEMM ceiling, and GB/s does not apply
};

// How the instrumented run's steps were timed: "kernel timeline" (the graph-replayed step, CUPTI),
// "event pairs" (direct launches), "mixed", or "none" (no step was instrumented).
std::string instrumentedTiming(const std::vector<gemma::StepStats>& steps) {
    int timeline = 0, instrumented = 0;
    for (const auto& s : steps) {
        instrumented += s.instrumented ? 1 : 0;
        timeline += s.instrumented && s.kernelTimeline ? 1 : 0;
    }
    if (instrumented == 0) return "none";
    return timeline == instrumented ? "kernel timeline" : timeline == 0 ? "event pairs" : "mixed";
}

// { "<bucket>": { "ms_per_token", "launches_per_step" } } from per-token values.
Json bucketsJson(const std::array<double, gemma::kBucketCount>& ms, const std::array<double, gemma::kBucketCount>& launches) {
    Json buckets = Json::object();
    for (int b = 0; b < gemma::kBucketCount; ++b) {
        buckets[gemma::bucketName(static_cast<gemma::Bucket>(b))] = {{"ms_per_token", ms[static_cast<std::size_t>(b)]},
                                                                       {"launches_per_step", launches[static_cast<std::size_t>(b)]}};
    }
    return buckets;
}

// The steps' mean buckets.
Json stepBuckets(const std::vector<gemma::StepStats>& steps) {
    if (steps.empty()) return Json::object();
    std::array<double, gemma::kBucketCount> ms{}, launches{};
    for (int b = 0; b < gemma::kBucketCount; ++b) {
        for (const auto& s : steps) {
            ms[static_cast<std::size_t>(b)] += s.bucketMs[b];
            launches[static_cast<std::size_t>(b)] += s.launches[b];
        }
        ms[static_cast<std::size_t>(b)] /= static_cast<double>(steps.size());
        launches[static_cast<std::size_t>(b)] /= static_cast<double>(steps.size());
    }
    return bucketsJson(ms, launches);
}

// Writes text to path; false, said on stderr, when the file cannot be written whole.
bool writeText(const std::string& path, const std::string& text) {
    std::ofstream file(path, std::ios::binary);
    file << text;
    file.close();
    if (!file) {
        std::cerr << "gemma-bench: could not write " << path << "\n";
        return false;
    }
    return true;
}

// The markdown table of a bucketsJson object.
void writeBucketTable(std::ostream& md, const Json& buckets) {
    md << "| bucket | ms/token | launches/step |\n|---|---|---|\n";
    char line[128];
    for (const auto& [name, value] : buckets.items()) {
        std::snprintf(line, sizeof line, "| %s | %.3f | %.1f |\n", name.c_str(), value["ms_per_token"].get<double>(),
                      value["launches_per_step"].get<double>());
        md << line;
    }
}

// The kernel timeline's busy time by kernel (the traced "kernels" array, largest first).
void writeKernelShareTable(std::ostream& md, const Json& kernels) {
    md << "\nThe same timeline by kernel (template instances apart; ms charged by the rule above, mean µs of one launch "
          "start to end, overlap included)\n\n| kernel | ms/token | launches/step | mean µs |\n|---|---|---|---|\n";
    char line[512];
    for (const auto& k : kernels) {
        std::snprintf(line, sizeof line, "| `%s` | %.3f | %.1f | %.2f |\n", k["name"].get<std::string>().c_str(),
                      k["ms_per_token"].get<double>(), k["launches_per_step"].get<double>(), k["mean_us"].get<double>());
        md << line;
    }
}

}  // namespace

int main(int argc, char** argv) {
    gemma::cli::CommandLine cli(
        "gemma-bench", "[--preset 12b|e2b|e4b|31b | --model PKG] [options]",
        {{"preset", true, "benchmark geometry with random weights (default 12b)", "NAME"},
         {"model", true, "benchmark a package instead of a preset", "PKG"},
         {"allocations", true, "KV allocations of the sweep (default 4096,16384,32768)", "N,N,..."},
         {"prompt-tokens", true, "prefill before the timed decode of the sweep (default 100)", "N"},
         {"decode-tokens", true, "decode steps timed per point (default 128)", "N"},
         {"depths", true, "depth sweep: context filled by a real prefill (default 0,8192,32768)", "N,N,..."},
         {"depth-allocation", true, "the depth sweep's KV allocation (default: the least holding the depth and the decoded tokens, at least 4096)", "N"},
         {"prefill", true, "prefill lengths (default 512,2048)", "N,N,..."},
         {"skip", true, "comma-separated parts to skip: sweep,depth,prefill,kernels", "PARTS"},
         {"json", true, "write the full results as JSON", "FILE"},
         {"markdown", true, "also write the markdown tables to a file", "FILE"},
         {"kv-cache", true, "GPU KV-cache element type: f16 (default: every layer in fp16), full-f16 (fp16 on full-attention layers, f32 on sliding ones), f32 or bf16", "TYPE"},
         {"no-graph", false, "launch every decode kernel directly instead of replaying the step as one CUDA graph"},
         {"no-gemm-prefill", false, "prefill with the FP4 matvec kernels instead of cuBLASLt GEMMs"},
         {"no-pdl", false, "launch the decode kernels without programmatic dependent launch (on by default on sm_90+)"},
         {"pdl", false, "accepted for older scripts and ignored: programmatic dependent launch is the default"},
         {"fp16-matvec", false, "batch-1 FP4 matvecs take x as fp16 hi + lo (the earlier form) instead of integers"},
         {"row-layout", false, "keep the FP4 weights in the package's row layout on the GPU instead of the tiled layout"},
         {"separate-attention", false, "run a decode step's attention as three launches (norm + RoPE, split, merge) instead of one fused launch"},
         {"separate-norms", false, "run a decode step's residual norms as their own kernels instead of inside the FP4 matvecs that consume them"},
         {"cuda-core-attention", false, "run the decode attention of unfused full layers (every full layer unless --fused-full-attention) on the fp32 CUDA-core split kernel instead of tensor cores"},
         {"thread-copies", false, "stage the decode's tensor-core attention pieces' K/V with every thread's cp.async instead of bulk copies (sm_90+; the same results; for compute-sanitizer racecheck)"},
         {"split-attention", false, "run the fused decode attention of sliding layers on the split kernel (last-block merge) instead of thread-block clusters"},
         {"fused-full-attention", false, "run full-attention layers with groups of at most 4 query heads per KV head (e4b's) on the fused fp32 split kernel instead of the tensor-core pieces (comparisons)"},
         {"tensor-core-sliding-attention", false, "run the sliding layers' decode attention on the tensor-core pieces instead of thread-block clusters (experiment; for depth)"},
         {"separate-pieces-norm-rope", false, "run the full layers' decode q/k/v norm + RoPE and KV-cache write in their own kernel before the tensor-core attention pieces instead of inside them (comparisons)"},
         {"cluster-full-attention-keys", true, "run the decode attention of full layers with at most 8 query heads per KV head (e2b, e4b, 31b) as thread-block clusters while the band is at most N keys, instead of the tensor-core pieces (default 0: never; docs/PERFORMANCE.md version 50)", "N"},
         {"no-cluster-head-split", false, "cluster attention with 4 or 8 query heads per KV head (e4b, e2b): one cluster per KV head over the whole group instead of two over half each (comparisons)"},
         {"no-attention-prefetch", false, "cluster attention: load the whole band after waiting for the q/k/v matvec instead of its earlier positions before the wait (comparisons)"},
         {"step-timeline", true, "write the traced decode step as a sequence of launches (CSV: position, kernel, mean start and end µs after the step's first start, µs charged by the buckets' rule) to FILE; needs the traced point's part (--trace-point)", "FILE"},
         {"trace-point", true, "which decode point's greedy chain the kernel timeline records, at the end of the run: sweep (the first allocation sweep point, the default) or depth (the deepest depth point)", "POINT"},
         {"timeline-steps", false, "time the instrumented steps on the GPU's kernel timeline of the graph-replayed step (CUPTI) instead of event pairs around direct launches (attaches CUPTI for the whole run)"},
         {"full-attention-band-keys", true, "while the band is at most N keys, split the full layers' decode attention pieces for N keys instead of the KV allocation, at allocations above N (default 4096; 0: never)", "N"},
         {"one-shot-lm-head", false, "run the decode lm_head on the one-shot grid of 4-row warps, launched programmatically, instead of the resident grid of 8-row warps launched ordinarily (same logits; the kernel table times it too)"},
         {"prefill-chunk", true, "positions per GEMM prefill chunk (default 2048; 32 to 8192): every chunk dequantizes the weights once", "N"},
         {"no-dequantize-ahead", false, "GEMM prefill: dequantize each weight just before its GEMMs instead of the next one on a second stream during the current one's"},
         {"prefill-input", true, "how the GEMM prefill feeds x to its FP16 GEMMs: split (hi + lo everywhere), split-down (the default: only the down projections split) or single", "FORM"},
         {"host-sampling", false, "time plain decode with the logits copied and the argmax taken on the host every step instead of the device-side greedy chain"},
         {"work-dir", true, "where a preset's temporary package is written (default /dev/shm or /tmp)", "DIR"}});
    if (auto exitCode = cli.parseStandard(argc, argv)) return *exitCode;
    std::string error;
    const auto allocations = parseList(cli.value("allocations").value_or("4096,16384,32768"), error);
    const auto depths = parseList(cli.value("depths").value_or("0,8192,32768"), error);
    const auto prefills = parseList(cli.value("prefill").value_or("512,2048"), error);
    std::int64_t promptTokens = 100, decodeTokens = 128, depthAllocation = 0;
    if (!error.empty() || !cli.getInt("prompt-tokens", 1, 1 << 20, promptTokens) || !cli.getInt("decode-tokens", 1, 1 << 16, decodeTokens) ||
        !cli.getInt("depth-allocation", 1, 1 << 20, depthAllocation)) {
        std::cerr << "gemma-bench: " << (error.empty() ? cli.error() : error) << "\n";
        return 1;
    }
    // A fixed depth allocation must hold every depth of the sweep and the tokens decoded after it.
    for (int depth : depths)
        if (depthAllocation > 0 && depthAllocation < depth + decodeTokens + 1) {
            std::cerr << "gemma-bench: --depth-allocation " << depthAllocation << " cannot hold depth " << depth << " and "
                      << decodeTokens << " decoded tokens (needs " << depth + decodeTokens + 1 << ")\n";
            return 1;
        }
    const std::string skip = cli.value("skip").value_or("");
    auto skipped = [&](const char* part) { return skip.find(part) != std::string::npos; };

    // ---- the engine's options: every flag checked before the minutes of measuring ----------------
    gemma::OpenOptions options{gemma::Device::Cuda, 4096};
    const std::string kvCache = cli.value("kv-cache").value_or(gemma::kvCacheTypeName(options.kvCache));
    if (!gemma::parseKvCacheType(kvCache, options.kvCache)) {
        std::cerr << "gemma-bench: --kv-cache must be full-f16, f32, f16 or bf16, got '" << kvCache << "'\n";
        return 1;
    }
    options.cudaGraph = !cli.has("no-graph");
    if (cli.has("no-gemm-prefill")) options.prefillGemmMinRows = 0;
    options.programmaticLaunch = !cli.has("no-pdl");
    options.integerMatvec = !cli.has("fp16-matvec");
    options.tiledWeights = !cli.has("row-layout");
    options.fusedAttention = !cli.has("separate-attention");
    options.fusedNorms = !cli.has("separate-norms");
    options.tensorCoreAttention = !cli.has("cuda-core-attention");
    options.clusterAttention = !cli.has("split-attention");
    options.bulkCopies = !cli.has("thread-copies");
    options.attentionPrefetch = !cli.has("no-attention-prefetch");
    options.fuseFullAttention = cli.has("fused-full-attention");
    options.tensorCoreSlidingAttention = cli.has("tensor-core-sliding-attention");
    options.fusedPiecesNormRope = !cli.has("separate-pieces-norm-rope");
    options.clusterAttentionHeadSplit = !cli.has("no-cluster-head-split");
    options.persistentLmHead = !cli.has("one-shot-lm-head");
    // An integer option into an int field (kept as it is when absent); false, said, when out of range.
    const auto intOption = [&](const char* name, std::int64_t minimum, std::int64_t maximum, int& field) {
        std::int64_t value = field;
        if (!cli.getInt(name, minimum, maximum, value)) {
            std::cerr << "gemma-bench: " << cli.error() << "\n";
            return false;
        }
        field = static_cast<int>(value);
        return true;
    };
    // Absent, --cluster-full-attention-keys leaves the engine's default (0: never).
    if (!intOption("cluster-full-attention-keys", 0, 1 << 20, options.clusterFullAttentionKeys) ||
        !intOption("full-attention-band-keys", 0, 1 << 20, options.fullAttentionBandKeys) ||
        !intOption("prefill-chunk", 32, 8192, options.gemmPrefillChunk))
        return 1;
    options.prefillDequantizeAhead = !cli.has("no-dequantize-ahead");
    const std::string prefillInput = cli.value("prefill-input").value_or("split-down");
    if (prefillInput == "split") options.prefillInput = gemma::PrefillInput::Split;
    else if (prefillInput == "split-down") options.prefillInput = gemma::PrefillInput::SplitDown;
    else if (prefillInput == "single") options.prefillInput = gemma::PrefillInput::Single;
    else {
        std::cerr << "gemma-bench: --prefill-input must be split, split-down or single\n";
        return 1;
    }
    options.kernelTimeline = cli.has("timeline-steps");
    const bool hostSampling = cli.has("host-sampling");
    const std::optional<std::string> stepTimelinePath = cli.value("step-timeline");
    // The kernel timeline's decode point: the first sweep point's (tg) or the deepest depth
    // point's (tg-depth) greedy chain.
    const std::string tracePoint = cli.value("trace-point").value_or("sweep");
    if (tracePoint != "sweep" && tracePoint != "depth") {
        std::cerr << "gemma-bench: --trace-point must be sweep or depth\n";
        return 1;
    }
    // The point's name is also the --skip word of its sweep.
    const bool traceDepth = tracePoint == "depth";
    const char* const tracedSweep = traceDepth ? "depth sweep" : "allocation sweep";
    const char* const tracedTest = traceDepth ? "tg-depth" : "tg";
    if (stepTimelinePath && (skipped(tracePoint.c_str()) || hostSampling)) {
        std::cerr << "gemma-bench: --step-timeline needs the " << tracedSweep << "'s traced greedy run (drop " << tracePoint
                  << " from --skip, and --host-sampling)\n";
        return 1;
    }
    std::vector<gemma::TracedPosition> stepTimeline;  // --step-timeline's rows, from the traced run
    std::string stepTimelineMissing = std::string("the ") + tracedSweep + " gave no run to trace";  // why, when empty
    // The allocation sweep decodes after the prompt in every allocation: say so now, not after
    // the ceilings and the package are written.
    for (const int allocation : allocations) {
        if (!skipped("sweep") && promptTokens + decodeTokens > allocation) {
            std::cerr << "gemma-bench: --prompt-tokens " << promptTokens << " + --decode-tokens " << decodeTokens
                      << " do not fit the allocation of " << allocation << " positions (--allocations)\n";
            return 1;
        }
    }

    // ---- ceilings first: the same process and run as everything measured against them ----------
    gemma::bench::Ceilings ceilings;
    std::fprintf(stderr, "measuring ceilings...\n");
    if (!gemma::bench::measureCeilings(ceilings, error)) {
        if (ceilings.readGBs <= 0.0) {
            std::cerr << "gemma-bench: " << error << "\n";
            return 1;
        }
        std::cerr << "gemma-bench: " << error << " (continuing without it)\n";
    }
    std::fprintf(stderr, "%s: read %.0f GB/s, copy %.0f GB/s, bf16 GEMM %.0f TFLOP/s\n", ceilings.gpu.c_str(), ceilings.readGBs,
                 ceilings.copyGBs, ceilings.bf16GemmTflops);

    // ---- the model ------------------------------------------------------------------------------
    std::string presetName = cli.value("preset").value_or("12b");
    fs::path package;
    fs::path temporary;
    if (auto model = cli.value("model")) {
        package = *model;
        presetName = fs::path(*model).filename().string();
    } else {
        auto config = gemma::ModelConfig::preset(presetName);
        if (!config) {
            std::cerr << "gemma-bench: " << config.status().message() << "\n";
            return 1;
        }
        fs::path dir = cli.value("work-dir").value_or(fs::exists("/dev/shm") ? "/dev/shm" : fs::temp_directory_path().string());
        temporary = dir / ("gemma-bench-" + presetName + "-" + std::to_string(::getpid()) + ".gemma");
        std::fprintf(stderr, "writing random %s package to %s...\n", presetName.c_str(), temporary.c_str());
        auto report = gemma::writeRandomPackage(*config, temporary, 1234);
        if (!report) {
            std::cerr << "gemma-bench: " << report.status().message() << "\n";
            return 1;
        }
        package = temporary;
    }
    struct Cleanup {
        fs::path path;
        ~Cleanup() {
            std::error_code ignored;
            if (!path.empty()) fs::remove(path, ignored);
        }
    } cleanup{temporary};

    auto engine = gemma::Engine::open(package, options);
    if (!engine) {
        std::cerr << "gemma-bench: " << engine.status().message() << "\n";
        return 1;
    }
    const auto info = (*engine)->info();
    // The package's own config, for bytes/token, FLOPs and the kernel table.
    gemma::ModelConfig config;
    if (auto parsed = gemma::ModelConfig::fromJson(info.configJson)) config = *parsed;
    if (config.layers.empty()) {
        std::cerr << "gemma-bench: the package's config could not be read back; byte counts will be missing\n";
    }

    Json results;
    results["schema"] = "gemma-bench/1";
    results["gpu"] = ceilings.gpu;
    results["ceilings"] = {{"read_GBs", ceilings.readGBs}, {"copy_GBs", ceilings.copyGBs}, {"bf16_gemm_TFLOPs", ceilings.bf16GemmTflops},
                           {"probe_bytes", ceilings.probeBytes}};
    results["model"] = {{"name", presetName}, {"weight_bytes_per_token", info.weightBytes}, {"backend", info.backend},
                        {"kv_cache", kvCache}};
    std::vector<Row> rows;
    auto decodePoint = [&](int allocation, int prompt, const char* test, int depth, bool alsoInstrumented) -> bool {
        gemma::DecodeBenchmarkRequest request;
        request.contextAllocation = allocation;
        request.promptTokens = prompt;
        request.decodeTokens = static_cast<int>(decodeTokens);
        request.instrumented = false;
        request.hostSampling = hostSampling;
        auto plain = (*engine)->benchmarkDecode(request, {});
        if (!plain) {
            std::cerr << "gemma-bench: " << plain.status().message() << "\n";
            return false;
        }
        // The other plain path in the same run (the host's share of a token, measured), and the
        // instrumented run for the buckets, where asked.
        request.hostSampling = !hostSampling;
        auto other = alsoInstrumented ? (*engine)->benchmarkDecode(request, {}) : plain;
        request.hostSampling = false;
        // The app's default sampling (top-k 64 on the backend's best entries), where asked.
        request.topKSampling = true;
        auto sampled = alsoInstrumented ? (*engine)->benchmarkDecode(request, {}) : plain;
        request.topKSampling = false;
        request.instrumented = true;
        auto timed = alsoInstrumented ? (*engine)->benchmarkDecode(request, {}) : plain;
        if (!timed || !other || !sampled) {
            std::cerr << "gemma-bench: " << (!timed ? timed : !other ? other : sampled).status().message() << "\n";
            return false;
        }
        const double deviceChainTps = hostSampling ? other->tokensPerSecond : plain->tokensPerSecond;
        const double hostSamplingTps = hostSampling ? plain->tokensPerSecond : other->tokensPerSecond;
        double bytes = 0.0;
        for (int i = 0; i < request.decodeTokens; ++i) bytes += bytesPerToken(info, config, prompt + i, options.kvCache);
        bytes /= request.decodeTokens;
        Row row{test, allocation, depth, plain->tokensPerSecond, plain->msPerToken, bytes * plain->tokensPerSecond / 1e9, 0.0};
        row.percent = 100.0 * row.gbs / ceilings.readGBs;
        rows.push_back(row);
        results["decode"].push_back({{"test", test},
                                     {"allocation", allocation},
                                     {"depth", depth},
                                     {"prompt_tokens", prompt},
                                     {"decode_tokens", request.decodeTokens},
                                     {"tokens_per_second", plain->tokensPerSecond},
                                     {"ms_per_token", plain->msPerToken},
                                     // A point without the instrumented run (the depth sweep's) has no buckets:
                                     // null, not the plain run's empty ones.
                                     {"instrumented_tokens_per_second", alsoInstrumented ? Json(timed->tokensPerSecond) : Json()},
                                     {"decode_path", hostSampling ? "host sampling" : "device greedy chain"},
                                     {"device_greedy_tokens_per_second", alsoInstrumented || !hostSampling ? Json(deviceChainTps) : Json()},
                                     {"host_sampling_tokens_per_second", alsoInstrumented || hostSampling ? Json(hostSamplingTps) : Json()},
                                     {"topk_sampling_tokens_per_second", alsoInstrumented ? Json(sampled->tokensPerSecond) : Json()},
                                     {"bytes_per_token", bytes},
                                     {"GBs", row.gbs},
                                     {"percent_of_read_ceiling", row.percent},
                                     // The uninstrumented (plain) run replays a graph (the step's, or the greedy chain's) unless
                                     // --no-graph or its self-check refused it; instrumented steps launch directly (event pairs).
                                     {"cuda_graph_plain_run",
                                      (*engine)->info().backend.find(hostSampling ? "graph on" : "greedy chain on") != std::string::npos},
                                     {"buckets", alsoInstrumented ? stepBuckets(timed->steps) : Json()},
                                     {"instrumented_timing", alsoInstrumented ? Json(instrumentedTiming(timed->steps)) : Json()},
                                     {"traced", Json()}});
        char alongside[96] = "";
        if (alsoInstrumented) {
            std::snprintf(alongside, sizeof alongside, " (%.1f instrumented, %.1f %s, %.1f top-k sampling)", timed->tokensPerSecond,
                          other->tokensPerSecond, hostSampling ? "device chain" : "host sampling", sampled->tokensPerSecond);
        }
        std::fprintf(stderr, "  %-8s alloc %6d depth %6d: %8.1f tok/s%s, %.0f GB/s, %.1f%% of read ceiling\n", test, allocation, depth,
                     plain->tokensPerSecond, alongside, row.gbs, row.percent);
        return true;
    };

    if (!skipped("sweep")) {
        std::fprintf(stderr, "allocation sweep...\n");
        for (int allocation : allocations) {
            if (!decodePoint(allocation, static_cast<int>(promptTokens), "tg", static_cast<int>(promptTokens), true)) return 1;
        }
    }
    if (!skipped("depth")) {
        std::fprintf(stderr, "depth sweep...\n");
        for (int depth : depths) {
            const int allocation = depthAllocation > 0 ? static_cast<int>(depthAllocation)
                                                       : std::max(4096, depth + static_cast<int>(decodeTokens) + 1);
            if (!decodePoint(allocation, std::max(depth, 1), "tg-depth", depth, false)) return 1;
        }
    }
    if (!skipped("prefill")) {
        std::fprintf(stderr, "prefill...\n");
        const double macs = linearMacsPerToken(config);
        for (int n : prefills) {
            gemma::DecodeBenchmarkRequest request;
            request.contextAllocation = std::max(4096, n + 2);
            request.promptTokens = n;
            request.decodeTokens = 1;
            request.instrumented = false;
            // The engine's warm pass pays the first prefill's one-time costs (cuBLASLt's algorithm
            // choice, kernel attribute setup), which are not prefill speed; prefillMs is the second.
            auto result = (*engine)->benchmarkDecode(request, {});
            if (!result) {
                std::cerr << "gemma-bench: " << result.status().message() << "\n";
                return 1;
            }
            const double seconds = result->prefillMs * 1e-3;
            const double tflops = 2.0 * macs * n / seconds / 1e12;
            Row row{"pp" + std::to_string(n), request.contextAllocation, 0, n / seconds, result->prefillMs / n, 0.0,
                    100.0 * tflops / ceilings.bf16GemmTflops, true};
            rows.push_back(row);
            results["prefill"].push_back({{"tokens", n},
                                          {"ms", result->prefillMs},
                                          {"tokens_per_second", n / seconds},
                                          {"time_to_first_token_ms", result->prefillMs + result->msPerToken},
                                          {"linear_TFLOPs", tflops},
                                          {"percent_of_bf16_gemm", 100.0 * tflops / ceilings.bf16GemmTflops}});
            std::fprintf(stderr, "  pp%-5d %9.1f tok/s, %.2f linear TFLOP/s (%.1f%% of the BF16 GEMM)\n", n, n / seconds, tflops,
                         100.0 * tflops / ceilings.bf16GemmTflops);
        }
    }
    std::vector<gemma::bench::KernelTiming> kernels;
    gemma::bench::SpacedTiming spaced;
    if (!skipped("kernels") && !config.layers.empty()) {
        std::fprintf(stderr, "kernel table...\n");
        std::set<std::tuple<std::string, std::int64_t, std::int64_t, bool>> shapes;
        const std::int64_t H = config.hiddenSize;
        for (const auto& g : config.layers) {
            const std::int64_t q = static_cast<std::int64_t>(config.numHeads) * g.headDim, kv = static_cast<std::int64_t>(g.kvHeads) * g.headDim;
            shapes.insert({"q_proj", q, H, false});
            if (!g.kvShared) shapes.insert({"k/v_proj", kv, H, false});
            shapes.insert({"o_proj", H, q, false});
            shapes.insert({"gate+up (GeGLU)", g.intermediateSize, H, true});
            shapes.insert({"down_proj", H, g.intermediateSize, false});
        }
        for (const auto& [name, out, in, geglu] : shapes) {
            gemma::bench::KernelTiming timing;
            if (!gemma::bench::timeFp4Matvec(out, in, geglu, options.integerMatvec, options.tiledWeights, timing, error)) {
                std::cerr << "gemma-bench: " << error << "\n";
                return 1;
            }
            timing.name = name;
            kernels.push_back(timing);
        }
        gemma::bench::KernelTiming head;
        if (!gemma::bench::timeLmHead(config.vocabSize, H, options.persistentLmHead, head, error)) {
            std::cerr << "gemma-bench: " << error << "\n";
            return 1;
        }
        kernels.push_back(head);
        // The lm_head and the read probe over its bytes, each launch after 3 ms of idle GPU (the
        // idle part of a 12b step: docs/PERFORMANCE.md version 21 step 6).
        if (!gemma::bench::timeSpacedLmHead(config.vocabSize, H, options.persistentLmHead, 3.0, spaced, error)) {
            std::cerr << "gemma-bench: " << error << "\n";
            return 1;
        }
        results["lm_head_spaced"] = {{"gap_ms", spaced.gapMs},
                                     {"bytes", spaced.bytes},
                                     {"lm_head_us", spaced.lmHeadUs},
                                     {"read_us", spaced.readUs},
                                     {"percent_of_spaced_read", spaced.percentOfRead()}};
        for (const auto& k : kernels) {
            results["kernels"].push_back({{"name", k.name}, {"out", k.out}, {"in", k.in}, {"us", k.microseconds}, {"bytes", k.bytes},
                                          {"GBs", k.gbs}, {"percent_of_read_ceiling", 100.0 * k.gbs / ceilings.readGBs}});
        }
    }

    // Last of all, the traced point's plain greedy chain again (the first sweep point's, or with
    // --trace-point depth the deepest depth point's) with the GPU's kernel timeline recorded
    // (CUPTI): the buckets of the steps as they really run, graph and programmatic overlap
    // included. Last, because CUPTI stays attached to the process once started and the
    // host-interactive decode paths measured slower with it (docs/PERFORMANCE.md version 10).
    Json* tracedEntry = nullptr;
    if (!skipped(tracePoint.c_str()) && !hostSampling && results.contains("decode"))
        for (Json& entry : results["decode"])
            if (entry["test"] == tracedTest && (traceDepth || !tracedEntry)) tracedEntry = &entry;
    if (tracedEntry) {
        std::fprintf(stderr, "kernel timeline...\n");
        Json& point = *tracedEntry;
        gemma::DecodeBenchmarkRequest request;
        request.contextAllocation = point["allocation"].get<int>();
        request.promptTokens = point["prompt_tokens"].get<int>();
        request.decodeTokens = point["decode_tokens"].get<int>();
        request.instrumented = false;
        // The engine's untraced warm pass captures and self-checks the greedy chain's graph again
        // (the depth sweep left another allocation), outside the timeline.
        request.traced = true;
        auto run = (*engine)->benchmarkDecode(request, {});
        Json traced = Json::object();
        if (run && run->traced) {
            traced["buckets"] = bucketsJson(run->trace.bucketMs, run->trace.launches);
            traced["tokens_per_second"] = run->tokensPerSecond;
            traced["ms_per_token"] = run->msPerToken;
            traced["busy_ms_per_token"] = run->trace.busyMs;
            traced["unknown_kernels"] = run->trace.unknownKernels;
            Json kernelShares = Json::array();
            for (const auto& k : run->trace.kernels)
                kernelShares.push_back({{"name", k.name}, {"ms_per_token", k.ms}, {"launches_per_step", k.launches}, {"mean_us", k.meanUs}});
            traced["kernels"] = kernelShares;
            stepTimeline = run->trace.sequence;
            stepTimelineMissing = "the traced steps did not all run one kernel sequence";
        } else {
            traced["unavailable"] = run ? std::string("the backend recorded no timeline") : run.status().message();
            stepTimelineMissing = traced["unavailable"].get<std::string>();
        }
        point["traced"] = traced;
    }

    // The backend's final description says whether the graph passed its self-check.
    results["model"]["backend"] = (*engine)->info().backend;
    results["model"]["cuda_graph_requested"] = options.cudaGraph;

    // ---- report -----------------------------------------------------------------------------------
    std::ostringstream md;
    md << "GPU: " << ceilings.gpu << " | read ceiling " << static_cast<int>(ceilings.readGBs) << " GB/s | copy "
       << static_cast<int>(ceilings.copyGBs) << " GB/s (read+write) | BF16 GEMM " << static_cast<int>(ceilings.bf16GemmTflops)
       << " TFLOP/s | backend " << (*engine)->info().backend << " | KV cache " << kvCache << "\n\n";
    md << "| preset | alloc | depth | test | tok/s | ms/token | GB/s | % of ceiling |\n|---|---|---|---|---|---|---|---|\n";
    char line[512];
    for (const auto& r : rows) {
        if (r.prefill) {
            std::snprintf(line, sizeof line, "| %s | %d | %d | %s | %.1f | %.3f | — | %.1f of BF16 GEMM |\n", presetName.c_str(),
                          r.allocation, r.depth, r.test.c_str(), r.tokensPerSecond, r.msPerToken, r.percent);
        } else {
            std::snprintf(line, sizeof line, "| %s | %d | %d | %s | %.1f | %.3f | %.0f | %.1f |\n", presetName.c_str(), r.allocation,
                          r.depth, r.test.c_str(), r.tokensPerSecond, r.msPerToken, r.gbs, r.percent);
        }
        md << line;
    }
    // The instrumented buckets: the first sweep point's (the depth sweep's points have none).
    if (results.contains("decode") && !results["decode"].empty() && results["decode"][0]["buckets"].is_object()) {
        const auto& first = results["decode"][0];
        auto rate = [](const Json& value) { return value.is_number() ? std::to_string(static_cast<int>(value.get<double>())) : std::string("—"); };
        md << "\nBuckets (alloc " << first["allocation"].get<int>() << ", instrumented "
           << static_cast<int>(first["instrumented_tokens_per_second"].get<double>()) << " tok/s vs plain "
           << static_cast<int>(first["tokens_per_second"].get<double>()) << " (" << first["decode_path"].get<std::string>()
           << "; host sampling " << rate(first["host_sampling_tokens_per_second"]) << ", device greedy chain "
           << rate(first["device_greedy_tokens_per_second"]) << ", top-k sampling " << rate(first["topk_sampling_tokens_per_second"])
           << "); plain run as a CUDA graph: " << (first["cuda_graph_plain_run"].get<bool>() ? "yes" : "no")
           << "; instrumented steps timed by " << first["instrumented_timing"].get<std::string>() << ")\n\n";
        writeBucketTable(md, first["buckets"]);
    }
    // The traced point's kernel timeline (the first sweep point's unless --trace-point depth).
    const std::size_t decodePoints = results.contains("decode") ? results["decode"].size() : 0;
    for (std::size_t i = 0; i < decodePoints; ++i) {
        const Json& point = results["decode"][i];
        const Json& traced = point["traced"];
        if (!traced.is_object()) continue;
        if (traced.contains("buckets")) {
            // The bucket table above is the first sweep point's: a timeline of another point says which.
            const bool firstSweepPoint = i == 0 && point["test"] == "tg";
            md << "\nBuckets from the kernel timeline (CUPTI) of the plain greedy chain ";
            if (!firstSweepPoint)
                md << "at alloc " << point["allocation"].get<int>() << ", depth " << point["depth"].get<int>() << " ";
            md << "(graph and programmatic overlap as run; "
               << static_cast<int>(traced["tokens_per_second"].get<double>()) << " tok/s traced vs plain "
               << static_cast<int>(point["tokens_per_second"].get<double>()) << "; each instant charged to the earliest-started "
               << "kernel running; gap = wall − the union of the kernels)\n\n";
            writeBucketTable(md, traced["buckets"]);
            if (traced["unknown_kernels"].get<int>() > 0)
                md << "\n" << traced["unknown_kernels"].get<int>() << " kernels had no bucket (counted in norm_elementwise).\n";
            if (traced.contains("kernels") && !traced["kernels"].empty()) writeKernelShareTable(md, traced["kernels"]);
        } else if (traced.contains("unavailable")) {
            md << "\nNo kernel timeline: " << traced["unavailable"].get<std::string>() << "\n";
        }
    }
    if (!kernels.empty()) {
        md << "\n| kernel | out × in | µs | GB/s | % of read ceiling |\n|---|---|---|---|---|\n";
        for (const auto& k : kernels) {
            std::snprintf(line, sizeof line, "| %s | %lld × %lld | %.1f | %.0f | %.1f |\n", k.name.c_str(), static_cast<long long>(k.out),
                          static_cast<long long>(k.in), k.microseconds, k.gbs, 100.0 * k.gbs / ceilings.readGBs);
            md << line;
        }
        std::snprintf(line, sizeof line,
                      "\nSpaced (each launch alone after %.0f ms of idle GPU, median of 15, event pair around it): lm_head %.1f µs, the "
                      "streaming read of the same %.2f GB %.1f µs: the lm_head at %.1f %% of the spaced read rate.\n",
                      spaced.gapMs, spaced.lmHeadUs, spaced.bytes / 1e9, spaced.readUs, spaced.percentOfRead());
        md << line;
    }
    std::cout << md.str();
    bool written = true;
    if (auto path = cli.value("markdown")) written = writeText(*path, md.str()) && written;
    if (auto path = cli.value("json")) written = writeText(*path, results.dump(2) + "\n") && written;
    if (stepTimelinePath && stepTimeline.empty()) {
        std::cerr << "gemma-bench: no step timeline: " << stepTimelineMissing << "\n";
        written = false;
    } else if (stepTimelinePath) {
        std::ostringstream csv;
        csv << "position,kernel,start_us,end_us,charged_us\n";
        for (std::size_t i = 0; i < stepTimeline.size(); ++i) {
            const auto& p = stepTimeline[i];
            // Kernel names hold commas (template arguments): quoted, as CSV does.
            std::snprintf(line, sizeof line, "%zu,\"%s\",%.3f,%.3f,%.3f\n", i, p.name.c_str(), p.startUs, p.endUs, p.chargedUs);
            csv << line;
        }
        written = writeText(*stepTimelinePath, csv.str()) && written;
    }
    return written ? 0 : 1;
}
