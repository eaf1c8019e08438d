// The forward pass of GEMMA4.md §2 on the CPU, in FP32, one named step after another.
#include "CpuBackend.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>

#include "ThreadPool.h"
#include "kernels/WeightFormats.h"
#include "reference/ReferenceOps.h"

namespace gemma {
namespace {

namespace ref = gemma::reference;

constexpr int kChunk = kPrefillChunk;

class BucketTimer {
public:
    BucketTimer(StepStats* stats, Bucket bucket) : stats_(stats), bucket_(bucket), start_(std::chrono::steady_clock::now()) {}
    ~BucketTimer() {
        if (!stats_) return;
        const auto elapsed = std::chrono::steady_clock::now() - start_;
        stats_->bucketMs[static_cast<int>(bucket_)] += std::chrono::duration<double, std::milli>(elapsed).count();
        stats_->launches[static_cast<int>(bucket_)] += 1;
    }
    BucketTimer(const BucketTimer&) = delete;
    BucketTimer& operator=(const BucketTimer&) = delete;

private:
    StepStats* stats_;
    Bucket bucket_;
    std::chrono::steady_clock::time_point start_;
};

struct LayerCache {
    int capacity = 0;
    std::vector<float> keys, values;  // [capacity][kvHeads][headDim]
};

class CpuBackend final : public Backend {
public:
    CpuBackend(const Package& package, const ModelWeights& weights)
        : config_(package.config()), weights_(weights), metadata_(package.metadata()) {
        const auto& c = config_;
        for (const auto& g : c.layers) {
            std::vector<float> inverse(static_cast<std::size_t>(g.headDim / 2));
            ref::ropeInverseFrequencies(g.headDim, g.ropeRotatedPairs, g.ropeTheta, inverse.data());
            for (auto& f : inverse) f = static_cast<float>(f / g.ropeFactor);
            ropeInverse_.push_back(std::move(inverse));
        }
    }

    std::string name() const override { return "cpu (fp32 reference)"; }
    int contextAllocation() const override { return allocation_; }
    KvCacheType kvCacheType() const override { return KvCacheType::F32; }

    Expected<double> measureReadBandwidth() override {
        // 512 MiB of non-zero words, read by every pool thread (XOR-folded so the loads stay).
        const std::size_t words = (std::size_t{512} << 20) / 8;
        std::vector<std::uint64_t> buffer;
        try {
            buffer.resize(words);
        } catch (const std::bad_alloc&) {
            return Status{ErrorCode::OutOfMemory, "no memory for the bandwidth probe"};
        }
        for (std::size_t i = 0; i < words; ++i) buffer[i] = i * 0x9E3779B97F4A7C15ull + 1;
        std::vector<double> seconds;
        std::atomic<std::uint64_t> sink{0};
        for (int pass = 0; pass < 5; ++pass) {
            const auto start = std::chrono::steady_clock::now();
            pool_.parallelFor(static_cast<std::int64_t>(words), [&](std::int64_t begin, std::int64_t end) {
                std::uint64_t fold = 0;
                for (std::int64_t i = begin; i < end; ++i) fold ^= buffer[static_cast<std::size_t>(i)];
                sink.fetch_xor(fold, std::memory_order_relaxed);
            });
            seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
        }
        std::sort(seconds.begin(), seconds.end());
        return static_cast<double>(words * 8) / seconds[2] / 1e9;
    }

    Status resetContext(int allocation) override {
        if (allocation <= 0) return {ErrorCode::InvalidArgument, "the context allocation must be positive"};
        const auto& c = config_;
        const std::int64_t totalBytes = kvCacheBytes(c, allocation, kPrefillChunk, KvCacheType::F32);
        if (totalBytes > (std::int64_t{64} << 30)) {
            return {ErrorCode::OutOfMemory, "a KV cache of " + std::to_string(totalBytes >> 20) + " MiB is too large for the CPU backend"};
        }
        caches_.assign(c.numLayers, LayerCache{});
        try {
            for (int l = 0; l < c.numLayers; ++l) {
                const auto& g = c.layers[l];
                if (g.kvShared) continue;
                auto& cache = caches_[l];
                cache.capacity = static_cast<int>(kvCacheSlots(g.type == LayerType::Sliding, c.slidingWindow, allocation));
                const auto size = static_cast<std::size_t>(cache.capacity) * g.kvHeads * g.headDim;
                cache.keys.assign(size, 0.0f);
                cache.values.assign(size, 0.0f);
            }
        } catch (const std::bad_alloc&) {
            caches_.clear();
            return {ErrorCode::OutOfMemory, "not enough memory for a KV cache of " + std::to_string(allocation) + " positions"};
        }
        allocation_ = allocation;
        position_ = 0;
        return Status::ok();
    }

    Status forward(std::span<const std::int32_t> tokens, int startPosition, bool allPositions, std::vector<float>& logits,
                   StepStats* stats) override {
        GEMMA_RETURN_IF_ERROR(checkForwardRequest(tokens, startPosition, position_, allocation_, config_.vocabSize));
        const auto vocab = static_cast<std::size_t>(config_.vocabSize);
        logits.assign((allPositions ? tokens.size() : 1) * vocab, 0.0f);
        std::vector<float> chunkLogits;
        for (std::size_t begin = 0; begin < tokens.size(); begin += kChunk) {
            const std::size_t count = std::min<std::size_t>(kChunk, tokens.size() - begin);
            const bool lastChunk = begin + count == tokens.size();
            const bool want = allPositions || lastChunk;
            runChunk(tokens.subspan(begin, count), startPosition + static_cast<int>(begin), want, allPositions, chunkLogits, stats);
            if (allPositions) {
                std::copy(chunkLogits.begin(), chunkLogits.end(), logits.begin() + static_cast<std::ptrdiff_t>(begin * vocab));
            } else if (lastChunk) {
                std::copy(chunkLogits.end() - static_cast<std::ptrdiff_t>(vocab), chunkLogits.end(), logits.begin());
            }
            position_ += static_cast<int>(count);
        }
        return Status::ok();
    }

private:
    // Splits the weight's output rows across the pool; each range runs the reference op on its
    // slice of W and is scattered into y's [rows][out] layout. Small ops stay on one thread.
    template <typename SliceOp>
    void parallelRows(std::int64_t out, std::int64_t in, std::int64_t rows, float* y, const SliceOp& slice) {
        if (out * in * rows < (1 << 18) || pool_.size() == 1) {
            slice(0, out, y);
            return;
        }
        pool_.parallelFor(out, [&](std::int64_t begin, std::int64_t end) {
            std::vector<float> part(static_cast<std::size_t>(rows * (end - begin)));
            slice(begin, end, part.data());
            for (std::int64_t r = 0; r < rows; ++r) {
                std::copy_n(&part[r * (end - begin)], end - begin, y + r * out + begin);
            }
        });
    }

    void linear(const LinearWeight& w, const float* x, std::int64_t rows, float* y, StepStats* stats) {
        BucketTimer timer(stats, Bucket::Fp4Matvec);
        parallelRows(w.out, w.in, rows, y, [&](std::int64_t begin, std::int64_t end, float* target) {
            if (w.format == TensorFormat::Fp4G128) {
                ref::linearFp4(w.codes + begin * formats::fp4RowBytes(w.in), w.scales + begin * formats::fp4GroupsPerRow(w.in),
                               end - begin, w.in, x, rows, target);
            } else {
                ref::linearF32(w.f32 + begin * w.in, end - begin, w.in, x, rows, target);
            }
        });
    }

    void lmHead(const float* x, std::int64_t rows, float* logits) {
        const auto& table = weights_.embedding;
        parallelRows(table.rows, table.cols, rows, logits, [&](std::int64_t begin, std::int64_t end, float* target) {
            if (table.format == TensorFormat::Fp8RowScaled) {
                ref::linearFp8Rows(table.codes + begin * table.cols, table.rowScales + begin, end - begin, table.cols, x, rows, target);
            } else {
                ref::linearF32(table.f32 + begin * table.cols, end - begin, table.cols, x, rows, target);
            }
        });
    }

    void gatherRow(const EmbeddingTable& table, std::int32_t row, float scale, float* out) {
        if (table.format == TensorFormat::Fp8RowScaled) {
            ref::dequantizeFp8Row(table.codes + static_cast<std::int64_t>(row) * table.cols, table.rowScales[row], table.cols, out);
        } else {
            std::copy_n(table.f32 + static_cast<std::int64_t>(row) * table.cols, table.cols, out);
        }
        ref::scaleInPlace(out, table.cols, scale);
    }

    void norm(float* x, const float* weight, std::int64_t rows, std::int64_t n, StepStats* stats) {
        BucketTimer timer(stats, Bucket::NormElementwise);
        ref::rmsNormRows(x, weight, config_.rmsNormEps, rows, n, x);
    }

    void add(float* y, const float* x, std::int64_t n, StepStats* stats) {
        BucketTimer timer(stats, Bucket::NormElementwise);
        ref::addInPlace(y, x, n);
    }

    // One chunk of consecutive positions through every layer (GEMMA4.md §2.10).
    void runChunk(std::span<const std::int32_t> tokens, int start, bool wantLogits, bool allPositions,
                  std::vector<float>& logits, StepStats* stats) {
        const auto& c = config_;
        const std::int64_t S = static_cast<std::int64_t>(tokens.size());
        const std::int64_t H = c.hiddenSize;
        const std::int64_t P = c.hiddenSizePerLayerInput;
        const std::int64_t L = c.numLayers;

        // 1. Scaled token embedding: h0 = E[id] · √H (√H rounded as the checkpoint dtype rounds it).
        std::vector<float> x(static_cast<std::size_t>(S * H));
        {
            BucketTimer timer(stats, Bucket::NormElementwise);
            for (std::int64_t s = 0; s < S; ++s) gatherRow(weights_.embedding, tokens[s], metadata_.embedScale, &x[s * H]);
        }

        // 2. Per-layer inputs (PLE, GEMMA4.md §2.2).
        std::vector<float> perLayerInputs;
        if (c.hasPerLayerInputs()) {
            perLayerInputs.resize(static_cast<std::size_t>(S * L * P));
            linear(weights_.perLayerModelProjection, x.data(), S, perLayerInputs.data(), stats);
            BucketTimer timer(stats, Bucket::NormElementwise);
            const auto projectionScale = static_cast<float>(std::pow(static_cast<double>(H), -0.5));
            const auto combineScale = static_cast<float>(std::pow(2.0, -0.5));
            ref::scaleInPlace(perLayerInputs.data(), S * L * P, projectionScale);
            ref::rmsNormRows(perLayerInputs.data(), weights_.perLayerProjectionNorm, c.rmsNormEps, S * L, P, perLayerInputs.data());
            std::vector<float> identity(static_cast<std::size_t>(L * P));
            for (std::int64_t s = 0; s < S; ++s) {
                gatherRow(weights_.perLayerEmbedding, tokens[s], metadata_.perLayerEmbedScale, identity.data());
                float* row = &perLayerInputs[s * L * P];
                for (std::int64_t i = 0; i < L * P; ++i) row[i] = (row[i] + identity[i]) * combineScale;
            }
        }

        // 3. The decoder layers.
        for (int l = 0; l < c.numLayers; ++l) runLayer(l, x, perLayerInputs, S, start, stats);

        // 4. Final norm, tied lm_head, softcap.
        if (!wantLogits) return;
        const std::int64_t first = allPositions ? 0 : S - 1;
        const std::int64_t rows = S - first;
        norm(x.data() + first * H, weights_.finalNorm, rows, H, stats);
        logits.assign(static_cast<std::size_t>(rows * c.vocabSize), 0.0f);
        BucketTimer timer(stats, Bucket::LmHead);
        lmHead(x.data() + first * H, rows, logits.data());
        if (c.finalLogitSoftcap > 0.0f) ref::softcap(logits.data(), rows * c.vocabSize, c.finalLogitSoftcap);
    }

    void runLayer(int l, std::vector<float>& x, const std::vector<float>& perLayerInputs, std::int64_t S, int start,
                  StepStats* stats) {
        const auto& c = config_;
        const auto& g = c.layers[l];
        const auto& w = weights_.layers[l];
        const std::int64_t H = c.hiddenSize;
        const std::int64_t d = g.headDim;
        const std::int64_t nH = c.numHeads;
        const std::int64_t kv = g.kvHeads;

        // Attention block: x += post_attention_norm(o_proj(attention(input_norm(x)))).
        std::vector<float> normed(x);
        norm(normed.data(), w.inputNorm, S, H, stats);
        std::vector<float> q(static_cast<std::size_t>(S * nH * d));
        linear(w.q, normed.data(), S, q.data(), stats);
        {
            BucketTimer timer(stats, Bucket::Attention);
            ref::rmsNormRows(q.data(), w.qNorm, c.rmsNormEps, S * nH, d, q.data());
            for (std::int64_t s = 0; s < S; ++s) ref::ropeHalfSplit(&q[s * nH * d], nH, d, ropeInverse_[l].data(), start + s);
        }
        LayerCache& cache = caches_[g.kvSourceLayer];
        if (!g.kvShared) {
            std::vector<float> k(static_cast<std::size_t>(S * kv * d)), v;
            linear(w.k, normed.data(), S, k.data(), stats);
            if (g.hasValueProjection) {
                v.resize(k.size());
                linear(w.v, normed.data(), S, v.data(), stats);
            } else {
                v = k;  // attention_k_eq_v: V is the raw K projection, before k_norm and RoPE
            }
            BucketTimer timer(stats, Bucket::Attention);
            ref::rmsNormRows(k.data(), w.kNorm, c.rmsNormEps, S * kv, d, k.data());
            ref::rmsNormRows(v.data(), nullptr, c.rmsNormEps, S * kv, d, v.data());
            for (std::int64_t s = 0; s < S; ++s) {
                ref::ropeHalfSplit(&k[s * kv * d], kv, d, ropeInverse_[l].data(), start + s);
                const std::int64_t slot = (start + s) % cache.capacity;
                std::copy_n(&k[s * kv * d], kv * d, &cache.keys[slot * kv * d]);
                std::copy_n(&v[s * kv * d], kv * d, &cache.values[slot * kv * d]);
            }
        }
        std::vector<float> attended(q.size());
        {
            BucketTimer timer(stats, Bucket::Attention);
            for (std::int64_t s = 0; s < S; ++s) {
                const std::int64_t position = start + s;
                const std::int64_t first = g.type == LayerType::Sliding ? std::max<std::int64_t>(0, position - c.slidingWindow + 1) : 0;
                ref::attentionDecode(&q[s * nH * d], cache.keys.data(), cache.values.data(), cache.capacity, nH, kv, d, first, position,
                                     1.0f, &attended[s * nH * d]);
            }
        }
        std::vector<float> branch(static_cast<std::size_t>(S * H));
        linear(w.o, attended.data(), S, branch.data(), stats);
        norm(branch.data(), w.postAttentionNorm, S, H, stats);
        add(x.data(), branch.data(), S * H, stats);

        // Feed-forward block: x += post_ffn_norm(down(gelu(gate(n)) ⊙ up(n))), n = pre_ffn_norm(x).
        normed = x;
        norm(normed.data(), w.preFeedforwardNorm, S, H, stats);
        const std::int64_t I = g.intermediateSize;
        std::vector<float> gate(static_cast<std::size_t>(S * I)), up(gate.size());
        linear(w.gate, normed.data(), S, gate.data(), stats);
        linear(w.up, normed.data(), S, up.data(), stats);
        {
            BucketTimer timer(stats, Bucket::NormElementwise);
            ref::gegluRows(gate.data(), up.data(), S * I, gate.data());
        }
        linear(w.down, gate.data(), S, branch.data(), stats);
        norm(branch.data(), w.postFeedforwardNorm, S, H, stats);
        add(x.data(), branch.data(), S * H, stats);

        // PLE block: x += post_pli_norm(projection(gelu(gate(x)) ⊙ pli_l)).
        if (c.hasPerLayerInputs()) {
            const std::int64_t P = c.hiddenSizePerLayerInput;
            std::vector<float> pleGate(static_cast<std::size_t>(S * P));
            linear(w.perLayerGate, x.data(), S, pleGate.data(), stats);
            {
                BucketTimer timer(stats, Bucket::NormElementwise);
                for (std::int64_t s = 0; s < S; ++s) {
                    const float* pli = &perLayerInputs[(s * c.numLayers + l) * P];
                    for (std::int64_t i = 0; i < P; ++i) pleGate[s * P + i] = ref::geluTanh(pleGate[s * P + i]) * pli[i];
                }
            }
            linear(w.perLayerProjection, pleGate.data(), S, branch.data(), stats);
            norm(branch.data(), w.postPerLayerNorm, S, H, stats);
            add(x.data(), branch.data(), S * H, stats);
        }

        // layer_scalar scales the whole residual stream.
        BucketTimer timer(stats, Bucket::NormElementwise);
        ref::scaleInPlace(x.data(), S * H, w.layerScalar);
    }

    const ModelConfig& config_;
    const ModelWeights& weights_;
    const PackageMetadata& metadata_;
    std::vector<std::vector<float>> ropeInverse_;
    std::vector<LayerCache> caches_;
    ThreadPool pool_;
    int allocation_ = 0;
    int position_ = 0;
};

}  // namespace

std::unique_ptr<Backend> makeCpuBackend(const Package& package, const ModelWeights& weights) {
    return std::make_unique<CpuBackend>(package, weights);
}

}  // namespace gemma
