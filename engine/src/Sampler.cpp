// Token sampler: docs/SAMPLING.md is the specification this file implements.
#include "gemma/Sampler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>

namespace gemma {
namespace {

constexpr float kImpossible = -std::numeric_limits<float>::infinity();

// The top-k scan tests blocks of this many logits against the entry threshold at once (a loop the
// compiler vectorises) and only looks at single logits in blocks that hold a winner.
constexpr std::size_t kBlock = 64;

// Top-p without top-k (topPBoundary): first test whether the best kTopPChunk tokens reach the
// mass (peaked distributions, the common case); otherwise narrow the boundary down with
// histograms of kTopPBins logit bins until at most kTopPSortLimit tokens are left to sort.
constexpr std::size_t kTopPChunk = 256;
constexpr std::size_t kTopPBins = 4096;
constexpr std::size_t kTopPSortLimit = 1024;

// Independent accumulators for the max scan, so the loop vectorises without -ffast-math.
constexpr std::size_t kLanes = 16;

float sanitized(float logit) {
    return logit > kImpossible ? logit : kImpossible;
}

// The HF / llama.cpp rule: shrink a positive logit, push a non-positive one further down.
float penalized(float logit, float penalty) {
    return logit > 0.0f ? logit / penalty : logit * penalty;
}

// The candidate order used everywhere: larger logit first, then lower id. A strict total order,
// so selected sets and sorted lists are unique whatever the standard library's algorithms do.
struct Better {
    template <typename C>
    bool operator()(const C& a, const C& b) const {
        return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
    }
};

struct ById {
    template <typename C>
    bool operator()(const C& a, const C& b) const {
        return a.id < b.id;
    }
};

// The k best entries of x[0, n) in Better order (unordered; at most k), made by make(i, x[i]):
// one pass in id order into `out`, a buffer of up to 2k + kBlock entries; when it is full,
// nth_element keeps the best k and the worst of those sets the entry bar: from then on a logit
// must be strictly above it (an equal logit has a larger id, so it loses the tie). Whole blocks
// with no value above the bar are skipped with one vectorised test (NaN never passes it). Each
// compaction drops at least k + kBlock entries, so the work stays O(n) even for an ascending
// row. keepImpossible: entries ranked -inf are taken too until the first compaction (a row with
// fewer than k possible entries still yields k); otherwise they never are.
template <typename Entry, typename Make>
void selectBestOf(const float* x, std::size_t n, std::size_t k, bool keepImpossible, std::vector<Entry>& out, Make make) {
    out.clear();
    const std::size_t capacity = 2 * k + kBlock;
    out.reserve(capacity);
    bool full = false;
    float bar = kImpossible;
    auto shrink = [&] {
        std::nth_element(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(k - 1), out.end(), Better{});
        out.resize(k);
        bar = out[k - 1].logit;
        full = true;
    };
    auto offer = [&](std::size_t i) {
        const Entry e = make(i, x[i]);
        if (e.logit > bar || (!full && keepImpossible)) out.push_back(e);
    };
    const bool skipBlocks = !keepImpossible;  // until the first compaction; always after it
    std::size_t i = 0;
    for (; i + kBlock <= n; i += kBlock) {
        if (full || skipBlocks) {
            int hit = 0;
            for (std::size_t j = 0; j < kBlock; ++j) hit |= x[i + j] > bar ? 1 : 0;
            if (hit == 0) continue;
        }
        for (std::size_t j = 0; j < kBlock; ++j) offer(i + j);
        if (out.size() >= capacity - kBlock) shrink();
    }
    for (; i < n; ++i) offer(i);
    if (out.size() > k) shrink();
}

// Largest entry of x[0, n) ignoring NaN; -inf when there is none.
float maxOf(const float* x, std::size_t n) {
    float lane[kLanes];
    for (float& l : lane) l = kImpossible;
    std::size_t i = 0;
    for (; i + kLanes <= n; i += kLanes)
        for (std::size_t j = 0; j < kLanes; ++j) lane[j] = x[i + j] > lane[j] ? x[i + j] : lane[j];
    float best = kImpossible;
    for (; i < n; ++i) best = x[i] > best ? x[i] : best;
    for (const float l : lane) best = l > best ? l : best;
    return best;
}

std::string formatValue(double value) {
    char buffer[64];
    std::snprintf(buffer, sizeof buffer, "%g", value);
    return buffer;
}

Status invalid(const char* field, const char* rule, double value) {
    return {ErrorCode::InvalidArgument, std::string("sampling parameter ") + field + " must be " +
                                            rule + " (got " + formatValue(value) + ")"};
}

}  // namespace

Sampler::Sampler(const SamplingParams& params)
    : params_(params), status_(validate(params)), rng_(params.seed) {}

Status Sampler::validate(const SamplingParams& p) {
    if (!std::isfinite(p.temperature) || p.temperature < 0.0f)
        return invalid("temperature", "finite and >= 0", p.temperature);
    if (p.topK < 0) return invalid("topK", ">= 0 (0 disables)", p.topK);
    if (!(p.topP > 0.0f && p.topP <= 1.0f))
        return invalid("topP", "in (0, 1] (1 disables)", p.topP);
    if (!(p.minP >= 0.0f && p.minP < 1.0f))
        return invalid("minP", "in [0, 1) (0 disables)", p.minP);
    if (!std::isfinite(p.repeatPenalty) || !(p.repeatPenalty > 0.0f))
        return invalid("repeatPenalty", "finite and > 0 (1 disables)", p.repeatPenalty);
    return Status::ok();
}

Expected<Sampler> Sampler::create(const SamplingParams& params) {
    Status status = validate(params);
    if (!status.isOk()) return status;
    return Sampler(params);
}

bool Sampler::isPlainArgmax(const SamplingParams& params) {
    return validate(params).isOk() && (params.greedy || params.temperature == 0.0f) && params.repeatPenalty == 1.0f;
}

std::int32_t Sampler::argmax(std::span<const float> logits) {
    if (logits.empty() ||
        logits.size() > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()))
        return -1;
    const float best = maxOf(logits.data(), logits.size());
    if (!(best > kImpossible)) return 0;  // every entry NaN or -inf
    // The first entry equal to the maximum (NaN equals nothing).
    const auto it = std::find(logits.begin(), logits.end(), best);
    return static_cast<std::int32_t>(it - logits.begin());
}

double Sampler::nextUniform() {
    // 53 random bits scaled into [0, 1): exact, and the same on every platform (unlike
    // std::uniform_real_distribution, whose algorithm is implementation-defined).
    return static_cast<double>(rng_() >> 11) * 0x1.0p-53;
}

std::int64_t Sampler::loadLogits(std::span<const float> logits,
                                 std::span<const std::int32_t> history) {
    const std::size_t n = logits.size();
    work_.resize(n);
    float* out = work_.data();
    std::int64_t possible = 0;
    for (std::size_t i = 0; i < n; ++i) {
        const float v = logits[i];
        const bool ok = v > kImpossible;  // false for NaN and -inf
        out[i] = ok ? v : kImpossible;
        possible += ok ? 1 : 0;
    }
    if (params_.repeatPenalty == 1.0f) return possible;
    // Recomputed from the original logit each time, so an id repeated in the history is
    // penalised once, however often it occurs. A huge penalty can overflow a logit to -inf.
    for (const std::int32_t id : history) {
        if (id < 0 || static_cast<std::size_t>(id) >= n) continue;
        const auto index = static_cast<std::size_t>(id);
        const float after = penalized(sanitized(logits[index]), params_.repeatPenalty);
        if (out[index] > kImpossible && !(after > kImpossible)) --possible;
        out[index] = after;
    }
    return possible;
}

float Sampler::collectAll() {
    candidates_.clear();
    float best = kImpossible;
    for (std::size_t i = 0; i < work_.size(); ++i) {
        const float v = work_[i];
        if (v > kImpossible) {
            candidates_.push_back({0.0, v, static_cast<std::int32_t>(i)});
            best = std::max(best, v);
        }
    }
    return best;
}

// The k best possible tokens of work_ (all of them if fewer are possible) into `out`, unordered
// (selectBestOf; work_ is already sanitized, so an entry is its value).
void Sampler::selectBest(std::size_t k, std::vector<Candidate>& out) const {
    selectBestOf(work_.data(), work_.size(), k, false, out,
                 [](std::size_t i, float v) { return Candidate{0.0, v, static_cast<std::int32_t>(i)}; });
}

void Sampler::selectTopK(std::int32_t k) {
    selectBest(static_cast<std::size_t>(k), candidates_);
    std::sort(candidates_.begin(), candidates_.end(), Better{});
}

double Sampler::weight(float logit, float maxLogit) const {
    // A +inf logit is the limit of a huge logit: the +inf tokens share all the mass.
    if (std::isinf(maxLogit)) return logit == maxLogit ? 1.0 : 0.0;
    return std::exp((static_cast<double>(logit) - static_cast<double>(maxLogit)) /
                    static_cast<double>(params_.temperature));
}

// Top-p keeps the shortest prefix of the candidates ordered by Better whose mass reaches
// topP * total (at least one token). This returns the last token of that prefix, or nothing when
// every candidate is kept, without sorting the whole list:
//  1. Peaked rows: the best kTopPChunk tokens, found like top-k, usually hold the mass already.
//  2. Otherwise a histogram: the undecided tokens go into kTopPBins bins of equal logit width from
//     their largest logit down (a larger logit never lands in a later bin; equal logits share
//     one). The bins' masses locate the bin where the running mass crosses the target; the bins
//     before it are kept, the ones after it dropped, and only that bin's tokens stay undecided.
//     Repeat until few remain (an outlier logit can make the first bins coarse), then sort them.
//     The undecided tokens are always in id order, so when their logits are all equal they are
//     already in Better order and need no sort.
std::optional<Sampler::Candidate> Sampler::topPBoundary(double total, float maxLogit) {
    const double target = static_cast<double>(params_.topP) * total;
    if (candidates_.size() > kTopPChunk) {
        selectBest(kTopPChunk, order_);
        std::sort(order_.begin(), order_.end(), Better{});
        double mass = 0.0;
        for (const Candidate& c : order_) {
            mass += weight(c.logit, maxLogit);
            if (mass >= target) return c;
        }
    }

    // The undecided tokens, in id order: every token before them in Better order is kept (their
    // mass is `above`), every token after them dropped.
    std::span<Candidate> undecided(candidates_);
    double above = 0.0;
    bool first = true;
    for (;;) {
        float hi = undecided.front().logit;
        float lo = hi;
        for (const Candidate& c : undecided) {
            hi = std::max(hi, c.logit);
            lo = std::min(lo, c.logit);
        }
        if (undecided.size() <= kTopPSortLimit || hi == lo) {
            if (first) {  // never sort candidates_ itself: it must stay in id order
                order_.assign(undecided.begin(), undecided.end());
                undecided = order_;
            }
            if (hi != lo) std::sort(undecided.begin(), undecided.end(), Better{});
            for (const Candidate& c : undecided) {
                above += c.weight;
                if (above >= target) return c;
            }
            // Rounding: a coarser sum said the target is reached inside this group.
            if (first) return std::nullopt;  // ... or nowhere: keep everything
            return undecided.back();
        }

        const bool infiniteTop = std::isinf(hi);
        const double top = static_cast<double>(hi);
        const double scale =
            infiniteTop ? 0.0 : static_cast<double>(kTopPBins) / (top - static_cast<double>(lo));
        const auto binOf = [&](float logit) -> std::size_t {
            if (infiniteTop) return logit == hi ? 0 : kTopPBins - 1;
            const double position = (top - static_cast<double>(logit)) * scale;
            return static_cast<std::size_t>(std::min(position, static_cast<double>(kTopPBins - 1)));
        };
        binMass_.assign(kTopPBins, 0.0);
        for (const Candidate& c : undecided) binMass_[binOf(c.logit)] += c.weight;
        std::size_t crossing = 0;
        while (crossing < kTopPBins && above + binMass_[crossing] < target)
            above += binMass_[crossing++];
        if (crossing == kTopPBins) {  // rounding again
            if (first) return std::nullopt;
            return *std::min_element(
                undecided.begin(), undecided.end(),
                [](const Candidate& a, const Candidate& b) { return Better{}(b, a); });
        }

        // Keep the crossing bin's tokens, in id order, at the front of order_.
        Candidate* out = first ? nullptr : undecided.data();
        if (first) order_.clear();
        std::size_t kept = 0;
        for (const Candidate& c : undecided) {
            if (binOf(c.logit) != crossing) continue;
            if (first)
                order_.push_back(c);
            else
                out[kept] = c;  // in place: the write index never passes the read index
            ++kept;
        }
        undecided = std::span<Candidate>(first ? order_.data() : out, kept);
        first = false;
    }
}

Sampler::Plan Sampler::plan(std::span<const float> logits, std::span<const std::int32_t> history) {
    Plan plan;
    plan.fixed = true;
    if (logits.empty() ||
        logits.size() > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max())) {
        plan.token = -1;
        return plan;
    }
    if (!status_.isOk()) {
        plan.token = argmax(logits);
        return plan;
    }
    if (params_.greedy || params_.temperature == 0.0f) {
        if (params_.repeatPenalty == 1.0f) {
            plan.token = argmax(logits);
        } else {
            loadLogits(logits, history);
            plan.token = argmax(work_);
        }
        return plan;
    }

    const std::int64_t possible = loadLogits(logits, history);
    if (possible == 0) {
        plan.token = 0;  // every token impossible: documented fallback, never a crash
        return plan;
    }

    candidates_.reserve(work_.size());
    const bool topK = params_.topK > 0 && static_cast<std::int64_t>(params_.topK) < possible;
    float maxLogit = kImpossible;
    if (topK) {
        selectTopK(params_.topK);  // sorted best first
        maxLogit = candidates_.front().logit;
    } else {
        maxLogit = collectAll();  // id order
    }
    return planCandidates(topK, maxLogit);
}

Sampler::Plan Sampler::planCandidates(bool topK, float maxLogit) {
    Plan plan;
    plan.fixed = true;
    if (candidates_.empty()) {  // cannot happen (possible > 0); a guard, not a crash, if it did
        plan.token = 0;
        return plan;
    }

    // Softmax weights in double with the maximum subtracted; the temperature divides here, which
    // equals dividing the logits first but without a float rounding (and keeps the top-k order
    // exact).
    double total = 0.0;
    for (Candidate& c : candidates_) {
        c.weight = weight(c.logit, maxLogit);
        total += c.weight;
    }

    if (params_.topP < 1.0f) {
        if (topK) {
            // Already sorted: keep the prefix.
            const double target = static_cast<double>(params_.topP) * total;
            double mass = 0.0;
            std::size_t kept = 0;
            while (kept < candidates_.size()) {
                mass += candidates_[kept++].weight;
                if (mass >= target) break;
            }
            candidates_.resize(kept);
        } else {
            if (const auto boundary = topPBoundary(total, maxLogit))
                std::erase_if(candidates_,
                              [&](const Candidate& c) { return Better{}(*boundary, c); });
        }
    }

    if (params_.minP > 0.0f) {
        // p < minP * p_max  <=>  weight < minP * maxWeight (the normaliser cancels). The top
        // token's weight is exp(0) = 1, so it always stays.
        double maxWeight = 0.0;
        for (const Candidate& c : candidates_) maxWeight = std::max(maxWeight, c.weight);
        const double threshold = static_cast<double>(params_.minP) * maxWeight;
        std::erase_if(candidates_,
                      [threshold](const Candidate& c) { return c.weight < threshold; });
    }

    // The draw walks the survivors in id order, so the same seed picks the same token whatever
    // order the selection algorithms left them in.
    if (topK) std::sort(candidates_.begin(), candidates_.end(), ById{});

    plan.fixed = false;
    plan.total = 0.0;
    for (const Candidate& c : candidates_) plan.total += c.weight;
    return plan;
}

std::int32_t Sampler::sample(std::span<const float> logits, std::span<const std::int32_t> history) {
    // Drawn before anything else so that every non-greedy call consumes exactly one output.
    const bool draws = status_.isOk() && !params_.greedy && params_.temperature > 0.0f;
    const double u = draws ? nextUniform() : 0.0;

    return draw(plan(logits, history), u);
}

std::int32_t Sampler::draw(const Plan& p, double u) const {
    if (p.fixed) return p.token;
    const double target = u * p.total;
    double cumulative = 0.0;
    for (const Candidate& c : candidates_) {
        cumulative += c.weight;
        if (target < cumulative) return c.id;
    }
    // Only reachable when u * total rounds up to total: take the last token that has mass.
    for (auto it = candidates_.rbegin(); it != candidates_.rend(); ++it)
        if (it->weight > 0.0) return it->id;
    return candidates_.front().id;  // unreachable: the top candidate always has weight 1
}

bool Sampler::samplesFromBest(const SamplingParams& params) {
    return validate(params).isOk() && !params.greedy && params.temperature > 0.0f && params.repeatPenalty == 1.0f &&
           params.topK >= 1 && params.topK <= kMaxBestTopK;
}

void Sampler::bestOf(std::span<const float> logits, int count, std::vector<RankedLogit>& out) {
    // `out` is selectBestOf's buffer, so a caller that reuses it allocates nothing per row.
    out.clear();
    if (count < 1 || logits.empty()) return;
    const auto k = std::min<std::size_t>(static_cast<std::size_t>(count), logits.size());
    selectBestOf(logits.data(), logits.size(), k, true, out, [](std::size_t i, float v) {
        v = sanitized(v);
        return RankedLogit{v == 0.0f ? 0.0f : v, static_cast<std::int32_t>(i)};  // -0 ranks as +0
    });
    std::sort(out.begin(), out.end(), Better{});
}

std::int32_t Sampler::sampleFromBest(std::span<const RankedLogit> best) {
    if (best.empty()) return -1;
    if (!samplesFromBest(params_)) {  // not a supported use: the best entry, no draw
        return best.front().logit > kImpossible ? best.front().id : 0;
    }
    const double u = nextUniform();  // sample() draws first as well
    // sample()'s plan: possible = the tokens above -inf; top-k applies when k < possible, and
    // the entry after the first k (when given) says whether more than k are possible.
    std::size_t possible = 0;
    while (possible < best.size() && best[possible].logit > kImpossible) ++possible;
    const auto k = static_cast<std::size_t>(params_.topK);
    if (possible == 0) return draw(Plan{true, 0, 0.0}, u);  // every token impossible
    candidates_.clear();
    const bool topK = k < possible;
    const std::size_t take = topK ? k : possible;
    for (std::size_t i = 0; i < take; ++i) candidates_.push_back({0.0, best[i].logit, best[i].id});
    // sample() keeps the top-k sorted best first (as given) and all-possible rows in id order.
    if (!topK) std::sort(candidates_.begin(), candidates_.end(), ById{});
    return draw(planCandidates(topK, candidates_.empty() ? kImpossible : best.front().logit), u);
}

std::span<const TokenProbability> Sampler::distribution(std::span<const float> logits,
                                                        std::span<const std::int32_t> history) {
    distribution_.clear();
    const Plan p = plan(logits, history);
    if (p.fixed) {
        if (p.token >= 0) distribution_.push_back({p.token, 1.0});
        return distribution_;
    }
    distribution_.reserve(candidates_.size());
    for (const Candidate& c : candidates_) distribution_.push_back({c.id, c.weight / p.total});
    return distribution_;
}

}  // namespace gemma
