// Picks the next token from a row of logits (docs/SAMPLING.md has the exact rules).
//
// Pipeline, in this order: repetition penalty -> temperature -> top-k -> softmax (double) ->
// top-p -> min-p -> renormalise -> one draw from a seeded std::mt19937_64, walking the survivors
// in increasing token id. Greedy (or a temperature of 0) is argmax after the repetition penalty.
// The result is a pure function of the parameters, the RNG state, the logits and the history; the
// member buffers are only scratch space reused between calls, so a Sampler allocates nothing per
// token once it has seen the vocabulary.
//
// Plain C++20: no Qt, no CUDA. Not thread-safe: one Sampler per generation, used from one thread.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <vector>

#include "gemma/Engine.h"
#include "gemma/Status.h"

namespace gemma {

// One entry of a row's best logits (Sampler::sampleFromBest, Backend::decodeBest).
struct RankedLogit {
    float logit = 0.0f;
    std::int32_t id = 0;
};

// One surviving token of the final distribution and its renormalised probability.
struct TokenProbability {
    std::int32_t id = 0;
    double probability = 0.0;
};

class Sampler {
public:
    // Validates the parameters (see validate()) and seeds the RNG with params.seed. It never
    // throws: invalid parameters are kept in status(), and such a Sampler only ever returns the
    // plain argmax of the logits (no penalty, no randomness) so that it cannot crash. Check
    // status(), or use create(), before trusting it.
    explicit Sampler(const SamplingParams& params);

    // Ok, or InvalidArgument naming the first bad field: temperature must be finite and >= 0,
    // topK >= 0, topP in (0, 1], minP in [0, 1), repeatPenalty finite and > 0. Every field is
    // checked even when greedy is set, so a bad setting is reported before it is ever used.
    static Status validate(const SamplingParams& params);

    // The Sampler, or the validation error.
    static Expected<Sampler> create(const SamplingParams& params);

    const Status& status() const { return status_; }
    const SamplingParams& params() const { return params_; }

    // The next token id in [0, logits.size()). `history` is every id the model has seen (prompt
    // and generated) and feeds the repetition penalty; ids outside the vocabulary are ignored.
    // Non-greedy calls advance the RNG by exactly one 64-bit output each, whatever the logits;
    // greedy calls never touch it. NaN logits count as -inf (impossible); if every logit is
    // impossible the result is 0. An empty row gives -1 (there is no token to return).
    std::int32_t sample(std::span<const float> logits, std::span<const std::int32_t> history);

    // The distribution sample() would draw from for the same inputs, without drawing (the RNG is
    // not touched): the surviving tokens in increasing id (the order the draw walks them) with
    // probabilities summing to 1. Greedy,
    // all-impossible and invalid-parameter cases give one token with probability 1; an empty row
    // gives an empty span. The span stays valid until the next call on this Sampler.
    std::span<const TokenProbability> distribution(std::span<const float> logits,
                                                   std::span<const std::int32_t> history);

    // Index of the largest logit; the lowest index wins ties; NaN never wins (it counts as -inf).
    // If every entry is NaN or -inf the result is 0; an empty span gives -1.
    static std::int32_t argmax(std::span<const float> logits);

    // Whether sample() is exactly argmax(logits) for these parameters whatever the history: valid,
    // greedy (or temperature 0) and no repetition penalty. Such choices can be made where the
    // logits are (Backend::decodeGreedy).
    static bool isPlainArgmax(const SamplingParams& params);

    // sample() from a row's best entries alone: for parameters where samplesFromBest() holds,
    // `best` = the row's bestCount(params) best entries (all of them when the row is shorter), in
    // the order: larger logit first, then lower id, with NaN counted as -inf and -0 as +0
    // (bestOf() makes it from a whole row; the CUDA backend's TopK kernel on the device).
    // The result, and the RNG's advance, equal sample(row, history) for every history: only
    // the top-k survivors ever carry mass, and the entry past them says whether more than k
    // tokens were possible (which decides how sample() ranks them). An empty span gives -1.
    std::int32_t sampleFromBest(std::span<const RankedLogit> best);
    // Valid, not greedy, temperature > 0, no repetition penalty and 1 <= topK <= kMaxBestTopK.
    static bool samplesFromBest(const SamplingParams& params);
    static int bestCount(const SamplingParams& params) { return params.topK + 1; }
    static constexpr int kMaxBestTopK = 64;
    // The `count` best entries of `logits` in sampleFromBest's order (fewer if the row is shorter).
    static void bestOf(std::span<const float> logits, int count, std::vector<RankedLogit>& out);

private:
    struct Candidate {
        double weight;  // exp((logit - max) / temperature), unnormalised
        float logit;    // after the repetition penalty, before the temperature
        std::int32_t id;
    };

    // What the pipeline decided before any draw.
    struct Plan {
        bool fixed = false;  // the answer is `token`, no draw needed (greedy, invalid, empty)
        std::int32_t token = 0;
        double total = 0.0;  // sum of candidates_[i].weight in draw order, when !fixed
    };

    Plan plan(std::span<const float> logits, std::span<const std::int32_t> history);
    // plan() from candidates_ on: the top-k survivors sorted best first (topK), or every
    // possible token in id order; their softmax, top-p, min-p and the draw order.
    Plan planCandidates(bool topK, float maxLogit);
    // The draw itself (u from nextUniform()).
    std::int32_t draw(const Plan& p, double u) const;
    // Fills work_ and returns how many of its entries are possible (> -inf).
    std::int64_t loadLogits(std::span<const float> logits, std::span<const std::int32_t> history);
    void selectBest(std::size_t k, std::vector<Candidate>& out) const;  // k >= 1, unordered
    // The k best tokens (k < number of possible tokens), sorted best first.
    void selectTopK(std::int32_t k);
    // Every possible token in id order; returns the max logit.
    float collectAll();
    double weight(float logit, float maxLogit) const;  // unnormalised softmax weight
    // The worst token top-p keeps (nothing: keep all), for candidates with weights set.
    std::optional<Candidate> topPBoundary(double total, float maxLogit);
    double nextUniform();

    SamplingParams params_;
    Status status_;
    std::mt19937_64 rng_;

    // Scratch buffers, grown to the vocabulary once and reused.
    std::vector<float> work_;  // logits with NaN -> -inf and the repetition penalty applied
    std::vector<Candidate> candidates_;  // the survivors; in id order once plan() returns
    std::vector<Candidate> order_;       // top-p selection scratch
    std::vector<double> binMass_;        // top-p histogram
    std::vector<TokenProbability> distribution_;
};

}  // namespace gemma
