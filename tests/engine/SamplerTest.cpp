// Tests for gemma::Sampler (docs/SAMPLING.md). Plain GoogleTest; no engine .cpp besides Sampler.
#include "gemma/Sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace gemma {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

using Ids = std::vector<std::int32_t>;

SamplingParams makeParams(float temperature, int topK, float topP, float minP,
                          float repeatPenalty = 1.0f, std::uint64_t seed = 0) {
    SamplingParams p;
    p.greedy = false;
    p.temperature = temperature;
    p.topK = topK;
    p.topP = topP;
    p.minP = minP;
    p.repeatPenalty = repeatPenalty;
    p.seed = seed;
    return p;
}

// No filtering at all: plain softmax(logits / T).
SamplingParams plainParams(float temperature = 1.0f, std::uint64_t seed = 0) {
    return makeParams(temperature, 0, 1.0f, 0.0f, 1.0f, seed);
}

// Random logits; with `ties`, values are drawn from a small grid so equal logits are common.
std::vector<float> randomLogits(std::mt19937_64& rng, std::size_t n, bool ties) {
    std::vector<float> out(n);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    std::uniform_int_distribution<int> grid(-20, 20);
    for (float& v : out) v = ties ? 0.25f * static_cast<float>(grid(rng)) : normal(rng);
    return out;
}

std::map<std::int32_t, double> asMap(std::span<const TokenProbability> dist) {
    std::map<std::int32_t, double> out;
    for (const TokenProbability& t : dist) {
        EXPECT_EQ(out.count(t.id), 0u) << "token " << t.id << " listed twice";
        out[t.id] = t.probability;
    }
    return out;
}

std::set<std::int32_t> idsOf(std::span<const TokenProbability> dist) {
    std::set<std::int32_t> out;
    for (const TokenProbability& t : dist) out.insert(t.id);
    return out;
}

// An independent, deliberately naive implementation of docs/SAMPLING.md (full sorts, sets),
// used as the oracle for the optimised pipeline.
std::map<std::int32_t, double> referenceDistribution(const std::vector<float>& logits,
                                                     const Ids& history, const SamplingParams& p) {
    std::vector<float> x(logits);
    for (float& v : x)
        if (std::isnan(v)) v = -kInf;
    std::set<std::int32_t> seen;
    for (std::int32_t id : history)
        if (id >= 0 && id < static_cast<std::int32_t>(x.size())) seen.insert(id);
    for (std::int32_t id : seen) {
        float& v = x[static_cast<std::size_t>(id)];
        v = v > 0 ? v / p.repeatPenalty : v * p.repeatPenalty;
    }
    struct C {
        float logit;
        std::int32_t id;
        double w;
    };
    std::vector<C> c;
    for (std::size_t i = 0; i < x.size(); ++i)
        if (x[i] > -kInf) c.push_back({x[i], static_cast<std::int32_t>(i), 0.0});
    std::sort(c.begin(), c.end(), [](const C& a, const C& b) {
        return a.logit != b.logit ? a.logit > b.logit : a.id < b.id;
    });
    if (p.topK > 0 && static_cast<std::size_t>(p.topK) < c.size())
        c.resize(static_cast<std::size_t>(p.topK));
    const double mx = c.front().logit;
    double total = 0;
    for (C& e : c) {
        e.w = std::exp((static_cast<double>(e.logit) - mx) / p.temperature);
        total += e.w;
    }
    if (p.topP < 1.0f) {
        double mass = 0;
        std::size_t keep = 0;
        while (keep < c.size()) {
            mass += c[keep++].w;
            if (mass >= static_cast<double>(p.topP) * total) break;
        }
        c.resize(keep);
    }
    if (p.minP > 0.0f) {
        const double wmax = c.front().w;
        std::erase_if(c, [&](const C& e) { return e.w < static_cast<double>(p.minP) * wmax; });
    }
    double kept = 0;
    for (const C& e : c) kept += e.w;
    std::map<std::int32_t, double> out;
    for (const C& e : c) out[e.id] = e.w / kept;
    return out;
}

void expectSameDistribution(const std::map<std::int32_t, double>& actual,
                            const std::map<std::int32_t, double>& expected) {
    ASSERT_EQ(actual.size(), expected.size());
    for (const auto& [id, prob] : expected) {
        auto it = actual.find(id);
        ASSERT_NE(it, actual.end()) << "token " << id << " missing";
        EXPECT_NEAR(it->second, prob, 1e-12 + 1e-9 * prob) << "token " << id;
    }
}

std::vector<double> softmax(const std::vector<float>& logits, double temperature) {
    double mx = -1e300;
    for (float v : logits) mx = std::max(mx, static_cast<double>(v));
    std::vector<double> p(logits.size());
    double total = 0;
    for (std::size_t i = 0; i < logits.size(); ++i) {
        p[i] = std::exp((logits[i] - mx) / temperature);
        total += p[i];
    }
    for (double& v : p) v /= total;
    return p;
}

double chiSquare(const std::vector<int>& counts, const std::vector<double>& probs, int draws) {
    double chi2 = 0;
    for (std::size_t i = 0; i < counts.size(); ++i) {
        const double expected = probs[i] * draws;
        chi2 += (counts[i] - expected) * (counts[i] - expected) / expected;
    }
    return chi2;
}

// ---- validate() --------------------------------------------------------------------------------

TEST(SamplerValidate, AcceptsDefaultsAndEdgeValues) {
    EXPECT_TRUE(Sampler::validate(SamplingParams{}).isOk());
    EXPECT_TRUE(Sampler::validate(makeParams(0.0f, 0, 1.0f, 0.0f)).isOk());
    EXPECT_TRUE(Sampler::validate(makeParams(100.0f, 1, 1e-6f, 0.999f, 0.01f)).isOk());
    Sampler sampler(SamplingParams{});
    EXPECT_TRUE(sampler.status().isOk());
    EXPECT_TRUE(Sampler::create(SamplingParams{}).hasValue());
}

TEST(SamplerValidate, RejectsEachBadParameter) {
    struct Case {
        const char* field;
        SamplingParams params;
    };
    auto with = [](auto mutate) {
        SamplingParams p;
        mutate(p);
        return p;
    };
    const std::vector<Case> cases = {
        {"temperature", with([](SamplingParams& p) { p.temperature = -0.5f; })},
        {"temperature", with([](SamplingParams& p) { p.temperature = kNaN; })},
        {"temperature", with([](SamplingParams& p) { p.temperature = kInf; })},
        {"topK", with([](SamplingParams& p) { p.topK = -1; })},
        {"topP", with([](SamplingParams& p) { p.topP = 0.0f; })},
        {"topP", with([](SamplingParams& p) { p.topP = -0.1f; })},
        {"topP", with([](SamplingParams& p) { p.topP = 1.0001f; })},
        {"topP", with([](SamplingParams& p) { p.topP = kNaN; })},
        {"minP", with([](SamplingParams& p) { p.minP = -0.01f; })},
        {"minP", with([](SamplingParams& p) { p.minP = 1.0f; })},
        {"minP", with([](SamplingParams& p) { p.minP = kNaN; })},
        {"repeatPenalty", with([](SamplingParams& p) { p.repeatPenalty = 0.0f; })},
        {"repeatPenalty", with([](SamplingParams& p) { p.repeatPenalty = -1.0f; })},
        {"repeatPenalty", with([](SamplingParams& p) { p.repeatPenalty = kNaN; })},
        {"repeatPenalty", with([](SamplingParams& p) { p.repeatPenalty = kInf; })},
        // Checked even when greedy would never use it.
        {"topP", with([](SamplingParams& p) {
             p.greedy = true;
             p.topP = 2.0f;
         })},
    };
    for (const Case& c : cases) {
        const Status s = Sampler::validate(c.params);
        EXPECT_FALSE(s.isOk()) << c.field;
        EXPECT_EQ(s.code(), ErrorCode::InvalidArgument) << c.field;
        EXPECT_NE(s.message().find(c.field), std::string::npos) << s.message();
        EXPECT_FALSE(Sampler(c.params).status().isOk()) << c.field;
        const Expected<Sampler> created = Sampler::create(c.params);
        EXPECT_FALSE(created.hasValue()) << c.field;
        EXPECT_EQ(created.status().code(), ErrorCode::InvalidArgument) << c.field;
    }
}

TEST(SamplerValidate, InvalidSamplerFallsBackToPlainArgmax) {
    SamplingParams p = plainParams(1.0f);
    p.topP = 0.0f;           // invalid
    p.repeatPenalty = 5.0f;  // would change the answer if it were applied
    Sampler sampler(p);
    ASSERT_FALSE(sampler.status().isOk());
    const std::vector<float> logits = {0.0f, 3.0f, 2.9f};
    const Ids history = {1};
    for (int i = 0; i < 20; ++i) EXPECT_EQ(sampler.sample(logits, history), 1);
    const auto dist = sampler.distribution(logits, history);
    ASSERT_EQ(dist.size(), 1u);
    EXPECT_EQ(dist[0].id, 1);
    EXPECT_EQ(dist[0].probability, 1.0);
}

// ---- argmax and greedy -------------------------------------------------------------------------

TEST(SamplerArgmax, TiesNaNAndInfinities) {
    EXPECT_EQ(Sampler::argmax(std::vector<float>{1.0f, 5.0f, 2.0f}), 1);
    EXPECT_EQ(Sampler::argmax(std::vector<float>{-3.0f, -1.0f, -2.0f}), 1);
    EXPECT_EQ(Sampler::argmax(std::vector<float>{4.0f, 7.0f, 7.0f, 7.0f}), 1);  // lowest index
    EXPECT_EQ(Sampler::argmax(std::vector<float>{kNaN, 1.0f, 2.0f, kNaN}), 2);
    EXPECT_EQ(Sampler::argmax(std::vector<float>{kNaN, -1e30f}), 1);
    EXPECT_EQ(Sampler::argmax(std::vector<float>{-5.0f, kNaN, -6.0f}), 0);
    EXPECT_EQ(Sampler::argmax(std::vector<float>{1.0f, kInf, kInf}), 1);
    EXPECT_EQ(Sampler::argmax(std::vector<float>{kNaN, kNaN, kNaN}), 0);  // all impossible
    EXPECT_EQ(Sampler::argmax(std::vector<float>{-kInf, -kInf}), 0);
    EXPECT_EQ(Sampler::argmax(std::vector<float>{kNaN, -kInf, kNaN}), 0);
    EXPECT_EQ(Sampler::argmax(std::vector<float>{-kInf, kNaN, -7.0f}), 2);
    EXPECT_EQ(Sampler::argmax(std::span<const float>{}), -1);
}

TEST(SamplerGreedy, MatchesArgmaxWithTiesAndNaN) {
    std::mt19937_64 rng(7);
    SamplingParams greedy = plainParams(1.0f);
    greedy.greedy = true;
    SamplingParams zeroT = plainParams(0.0f);
    Sampler a(greedy), b(zeroT);
    for (int trial = 0; trial < 200; ++trial) {
        std::vector<float> logits = randomLogits(rng, 300, /*ties=*/true);
        logits[static_cast<std::size_t>(trial) % 300] = kNaN;
        const std::int32_t expected = Sampler::argmax(logits);
        // The naive answer: first index holding the maximum non-NaN value.
        float best = -kInf;
        for (float v : logits)
            if (!std::isnan(v)) best = std::max(best, v);
        const auto first = std::find(logits.begin(), logits.end(), best) - logits.begin();
        ASSERT_EQ(expected, first);
        EXPECT_EQ(a.sample(logits, {}), expected);
        EXPECT_EQ(b.sample(logits, {}), expected);
    }
}

TEST(SamplerGreedy, AppliesRepetitionPenaltyFirst) {
    SamplingParams p = plainParams(1.0f);
    p.greedy = true;
    p.repeatPenalty = 2.0f;
    Sampler sampler(p);
    const std::vector<float> logits = {2.0f, 1.5f, -1.0f};
    EXPECT_EQ(sampler.sample(logits, {}), 0);
    EXPECT_EQ(sampler.sample(logits, Ids{0}), 1);     // 2/2 = 1 < 1.5
    EXPECT_EQ(sampler.sample(logits, Ids{0, 1}), 0);  // 1 vs 0.75
}

// ---- top-k -------------------------------------------------------------------------------------

TEST(SamplerTopK, OneIsGreedy) {
    std::mt19937_64 rng(11);
    Sampler sampler(makeParams(1.5f, 1, 1.0f, 0.0f, 1.0f, 99));
    for (int trial = 0; trial < 300; ++trial) {
        std::vector<float> logits = randomLogits(rng, 257, /*ties=*/true);
        if (trial % 3 == 0) logits[5] = kNaN;
        EXPECT_EQ(sampler.sample(logits, {}), Sampler::argmax(logits));
    }
}

TEST(SamplerTopK, KeepsBoundaryTiesByLowestIndex) {
    const std::vector<float> logits = {1.0f, 3.0f, 3.0f, 3.0f, 0.0f, 3.0f};
    Sampler k2(makeParams(1.0f, 2, 1.0f, 0.0f));
    EXPECT_EQ(idsOf(k2.distribution(logits, {})), (std::set<std::int32_t>{1, 2}));
    Sampler k3(makeParams(1.0f, 3, 1.0f, 0.0f));
    EXPECT_EQ(idsOf(k3.distribution(logits, {})), (std::set<std::int32_t>{1, 2, 3}));
    Sampler k5(makeParams(1.0f, 5, 1.0f, 0.0f));
    EXPECT_EQ(idsOf(k5.distribution(logits, {})), (std::set<std::int32_t>{0, 1, 2, 3, 5}));
    const auto dist = k3.distribution(logits, {});
    for (const TokenProbability& t : dist) EXPECT_DOUBLE_EQ(t.probability, 1.0 / 3.0);
}

TEST(SamplerTopK, ZeroDisablesAndLargeKEqualsDisabled) {
    std::mt19937_64 rng(3);
    const std::vector<float> logits = randomLogits(rng, 1000, false);
    Sampler off(makeParams(1.0f, 0, 1.0f, 0.0f, 1.0f, 5));
    EXPECT_EQ(off.distribution(logits, {}).size(), 1000u);
    expectSameDistribution(asMap(off.distribution(logits, {})),
                           referenceDistribution(logits, {}, off.params()));
    // k >= vocab keeps everything and draws exactly like k = 0 for the same seed.
    for (int k : {1000, 1001, 1 << 30}) {
        Sampler big(makeParams(1.0f, k, 1.0f, 0.0f, 1.0f, 5));
        Sampler disabled(makeParams(1.0f, 0, 1.0f, 0.0f, 1.0f, 5));
        EXPECT_EQ(big.distribution(logits, {}).size(), 1000u);
        for (int i = 0; i < 300; ++i)
            ASSERT_EQ(big.sample(logits, {}), disabled.sample(logits, {}));
    }
}

TEST(SamplerTopK, ImpossibleTokensAreNeverKept) {
    const std::vector<float> logits = {0.0f, -kInf, kNaN, 1.0f};
    Sampler sampler(makeParams(1.0f, 3, 1.0f, 0.0f));
    const auto dist = asMap(sampler.distribution(logits, {}));
    ASSERT_EQ(dist.size(), 2u);
    EXPECT_NEAR(dist.at(3), std::exp(1.0) / (1.0 + std::exp(1.0)), 1e-15);
    EXPECT_NEAR(dist.at(0), 1.0 / (1.0 + std::exp(1.0)), 1e-15);
}

// The top-k scan against the oracle on rows that stress its buffer: many ties (the boundary rule
// matters), ascending and descending rows (a compaction every k entries, or none), a constant row.
TEST(SamplerTopK, MatchesReferenceOnAwkwardRows) {
    std::mt19937_64 rng(21);
    std::vector<std::vector<float>> rows = {
        randomLogits(rng, 5000, true), randomLogits(rng, 5000, false), std::vector<float>(5000),
        std::vector<float>(5000), std::vector<float>(5000, 0.5f)};
    for (std::size_t i = 0; i < 5000; ++i) {
        rows[2][i] = 0.01f * static_cast<float>(i);
        rows[3][i] = -0.01f * static_cast<float>(i);
    }
    for (std::size_t r = 0; r < rows.size(); ++r) {
        for (int k : {1, 2, 7, 64, 1000, 2500, 4999}) {
            Sampler sampler(makeParams(0.8f, k, 1.0f, 0.0f));
            const auto dist = sampler.distribution(rows[r], {});
            ASSERT_EQ(dist.size(), static_cast<std::size_t>(k)) << "row " << r;
            expectSameDistribution(asMap(dist),
                                   referenceDistribution(rows[r], {}, sampler.params()));
        }
    }
}

// ---- top-p -------------------------------------------------------------------------------------

TEST(SamplerTopP, OneKeepsEverythingAndTinyKeepsTheTopToken) {
    std::mt19937_64 rng(4);
    const std::vector<float> logits = randomLogits(rng, 500, false);
    Sampler all(makeParams(1.0f, 0, 1.0f, 0.0f));
    EXPECT_EQ(all.distribution(logits, {}).size(), 500u);
    Sampler tiny(makeParams(1.0f, 0, 1e-7f, 0.0f, 1.0f, 8));
    const auto dist = tiny.distribution(logits, {});
    ASSERT_EQ(dist.size(), 1u);
    EXPECT_EQ(dist[0].id, Sampler::argmax(logits));
    EXPECT_EQ(dist[0].probability, 1.0);
    for (int i = 0; i < 100; ++i) EXPECT_EQ(tiny.sample(logits, {}), Sampler::argmax(logits));
}

// Equal logits give weights of exactly exp(0) = 1, so the masses are exact: with 8 tokens the
// prefix of 3 has mass exactly 0.375. Reaching topP exactly stops the prefix (mass >= topP).
TEST(SamplerTopP, MassExactlyOnTheBoundary) {
    const std::vector<float> logits(8, 0.5f);
    auto keptCount = [&](float topP) {
        Sampler s(makeParams(1.0f, 0, topP, 0.0f));
        return s.distribution(logits, {}).size();
    };
    EXPECT_EQ(keptCount(0.375f), 3u);
    EXPECT_EQ(keptCount(std::nextafter(0.375f, 1.0f)), 4u);
    EXPECT_EQ(keptCount(std::nextafter(0.375f, 0.0f)), 3u);
    EXPECT_EQ(keptCount(0.125f), 1u);
    EXPECT_EQ(keptCount(0.5f), 4u);
    EXPECT_EQ(keptCount(0.875f), 7u);
    EXPECT_EQ(keptCount(0.9f), 8u);
    // Ties are ordered by id, so the kept prefix is the lowest ids.
    Sampler s(makeParams(1.0f, 0, 0.375f, 0.0f));
    EXPECT_EQ(idsOf(s.distribution(logits, {})), (std::set<std::int32_t>{0, 1, 2}));
    for (const TokenProbability& t : s.distribution(logits, {}))
        EXPECT_DOUBLE_EQ(t.probability, 1.0 / 3.0);
}

TEST(SamplerTopP, RenormalisesTheKeptPrefix) {
    // Probabilities 0.5, 0.25, 0.125, 0.125 (up to exp rounding); topP 0.7 keeps {0, 1}.
    const std::vector<float> logits = {0.0f, std::log(0.5f), std::log(0.25f), std::log(0.25f)};
    Sampler s(makeParams(1.0f, 0, 0.7f, 0.0f));
    const auto dist = asMap(s.distribution(logits, {}));
    ASSERT_EQ(dist.size(), 2u);
    EXPECT_NEAR(dist.at(0), 2.0 / 3.0, 1e-7);
    EXPECT_NEAR(dist.at(1), 1.0 / 3.0, 1e-7);
}

// Without top-k the prefix is found from the best 256 tokens when they hold the mass (peaked
// rows) and otherwise through a logit histogram (flat rows); both against the oracle.
TEST(SamplerTopP, MatchesReferencePeakedAndFlat) {
    std::mt19937_64 rng(33);
    for (float temperature : {0.3f, 1.0f, 4.0f}) {
        const std::vector<float> logits = randomLogits(rng, 20000, false);
        for (float topP : {0.1f, 0.5f, 0.9f, 0.95f, 0.999f}) {
            Sampler sampler(makeParams(temperature, 0, topP, 0.0f));
            expectSameDistribution(asMap(sampler.distribution(logits, {})),
                                   referenceDistribution(logits, {}, sampler.params()));
        }
    }
    // Masked tokens with a finite huge negative logit make the first histogram level coarse (every
    // real token lands in its first bin); a tie-heavy row leaves whole groups of equal logits.
    std::vector<float> masked = randomLogits(rng, 20000, false);
    for (std::size_t i = 0; i < masked.size(); ++i) {
        if (i % 2 == 0)
            masked[i] = i % 4 == 0 ? -1e9f : -3e38f;
        else
            masked[i] *= 0.15f;
    }
    const std::vector<float> grid = randomLogits(rng, 20000, true);
    for (const std::vector<float>* row : {&std::as_const(masked), &grid}) {
        for (float topP : {0.3f, 0.5f, 0.9f, 0.99f}) {
            Sampler sampler(makeParams(1.5f, 0, topP, 0.0f));
            expectSameDistribution(asMap(sampler.distribution(*row, {})),
                                   referenceDistribution(*row, {}, sampler.params()));
        }
    }
    // Combined with top-k (already sorted candidates) and with ties.
    const std::vector<float> tied = randomLogits(rng, 3000, true);
    for (int k : {5, 40, 2000}) {
        Sampler sampler(makeParams(1.3f, k, 0.8f, 0.0f));
        expectSameDistribution(asMap(sampler.distribution(tied, {})),
                               referenceDistribution(tied, {}, sampler.params()));
    }
}

// Rows where many tokens share the top weight: a constant row (every token in one histogram bin)
// and rows with hundreds of +inf logits (each +inf token has weight 1, the rest 0). The kept
// prefix is the ceil(topP * count) lowest ids among the tied tokens.
TEST(SamplerTopP, ManyTiedTopTokens) {
    for (std::size_t count : {100u, 700u, 5000u}) {
        const std::vector<float> constant(count, -2.0f);
        for (float topP : {0.3f, 0.77f}) {
            Sampler s(makeParams(1.0f, 0, topP, 0.0f));
            const auto expected = static_cast<std::size_t>(
                std::ceil(static_cast<double>(topP) * static_cast<double>(count)));
            const auto ids = idsOf(s.distribution(constant, {}));
            ASSERT_EQ(ids.size(), expected) << count << " " << topP;
            EXPECT_EQ(*ids.rbegin(), static_cast<std::int32_t>(expected - 1));
        }
    }
    std::vector<float> infinite(1000, 1.0f);
    std::vector<std::int32_t> infIds;
    for (std::size_t i = 0; i < infinite.size(); ++i)
        if (i % 5 != 0) {  // 800 of them
            infinite[i] = kInf;
            infIds.push_back(static_cast<std::int32_t>(i));
        }
    for (float topP : {0.01f, 0.5f, 0.9f}) {
        Sampler s(makeParams(1.0f, 0, topP, 0.0f));
        const auto m = static_cast<std::size_t>(std::ceil(static_cast<double>(topP) * 800));
        const auto dist = asMap(s.distribution(infinite, {}));
        ASSERT_EQ(dist.size(), m) << topP;
        for (std::size_t j = 0; j < m; ++j)
            EXPECT_DOUBLE_EQ(dist.at(infIds[j]), 1.0 / static_cast<double>(m));
    }
}

// ---- min-p -------------------------------------------------------------------------------------

TEST(SamplerMinP, EdgeCases) {
    // Weights relative to the top: 1, e^-1 = 0.3679, e^-2 = 0.1353, e^-3 = 0.0498.
    const std::vector<float> logits = {3.0f, 2.0f, 1.0f, 0.0f};
    auto kept = [&](float minP) {
        Sampler s(makeParams(1.0f, 0, 1.0f, minP));
        return idsOf(s.distribution(logits, {}));
    };
    EXPECT_EQ(kept(0.0f), (std::set<std::int32_t>{0, 1, 2, 3}));
    EXPECT_EQ(kept(0.049f), (std::set<std::int32_t>{0, 1, 2, 3}));
    EXPECT_EQ(kept(0.051f), (std::set<std::int32_t>{0, 1, 2}));
    EXPECT_EQ(kept(0.135f), (std::set<std::int32_t>{0, 1, 2}));
    EXPECT_EQ(kept(0.136f), (std::set<std::int32_t>{0, 1}));
    EXPECT_EQ(kept(0.99f), (std::set<std::int32_t>{0}));
    // Tokens tied with the maximum have p == p_max and always survive, even at the largest minP.
    const std::vector<float> tied = {1.0f, 2.0f, 2.0f, 1.999f};
    Sampler s(makeParams(1.0f, 0, 1.0f, std::nextafter(1.0f, 0.0f)));
    const auto dist = asMap(s.distribution(tied, {}));
    ASSERT_EQ(dist.size(), 2u);
    EXPECT_DOUBLE_EQ(dist.at(1), 0.5);
    EXPECT_DOUBLE_EQ(dist.at(2), 0.5);
}

TEST(SamplerMinP, RenormalisesAndComposesWithOtherFilters) {
    const std::vector<float> logits = {3.0f, 2.0f, 1.0f, 0.0f};
    Sampler s(makeParams(1.0f, 0, 1.0f, 0.1f));
    const auto dist = asMap(s.distribution(logits, {}));
    const double z = 1.0 + std::exp(-1.0) + std::exp(-2.0);
    ASSERT_EQ(dist.size(), 3u);
    EXPECT_NEAR(dist.at(0), 1.0 / z, 1e-12);
    EXPECT_NEAR(dist.at(1), std::exp(-1.0) / z, 1e-12);
    EXPECT_NEAR(dist.at(2), std::exp(-2.0) / z, 1e-12);
    std::mt19937_64 rng(44);
    for (int trial = 0; trial < 6; ++trial) {
        const std::vector<float> row = randomLogits(rng, 4000, trial % 2 == 1);
        Sampler combo(makeParams(0.9f, trial < 3 ? 0 : 300, 0.9f, 0.02f));
        expectSameDistribution(asMap(combo.distribution(row, {})),
                               referenceDistribution(row, {}, combo.params()));
    }
}

// ---- repetition penalty ------------------------------------------------------------------------

TEST(SamplerRepetitionPenalty, PositiveNegativeZeroAndRepeats) {
    const std::vector<float> logits = {2.0f, -2.0f, 1.0f, 0.0f, 0.5f};
    // id 1 appears three times but is penalised once (-4, not -16); id 0 twice (1, not 0.5);
    // id 3 has logit 0, which stays 0; ids out of range are ignored.
    const Ids history = {0, 1, 1, 3, 1, 0, -1, 5, 1000};
    Sampler s(makeParams(1.0f, 0, 1.0f, 0.0f, 2.0f));
    const auto dist = asMap(s.distribution(logits, history));
    const std::vector<double> penalised = {1.0, -4.0, 1.0, 0.0, 0.5};
    double z = 0;
    for (double v : penalised) z += std::exp(v);
    ASSERT_EQ(dist.size(), 5u);
    for (std::int32_t id = 0; id < 5; ++id)
        EXPECT_NEAR(dist.at(id), std::exp(penalised[static_cast<std::size_t>(id)]) / z, 1e-12)
            << "token " << id;
}

TEST(SamplerRepetitionPenalty, BelowOneBoostsAndTemperatureComesAfter) {
    const std::vector<float> logits = {1.0f, -1.0f, 0.5f};
    Sampler s(makeParams(0.5f, 0, 1.0f, 0.0f, 0.5f));
    // Penalty 0.5: 1 -> 2 and -1 -> -0.5; then temperature 0.5 doubles: 4, -1, 1.
    const auto dist = asMap(s.distribution(logits, Ids{0, 1}));
    const double z = std::exp(4.0) + std::exp(-1.0) + std::exp(1.0);
    EXPECT_NEAR(dist.at(0), std::exp(4.0) / z, 1e-12);
    EXPECT_NEAR(dist.at(1), std::exp(-1.0) / z, 1e-12);
    EXPECT_NEAR(dist.at(2), std::exp(1.0) / z, 1e-12);
    // The penalty changes which tokens survive top-k.
    Sampler k1(makeParams(1.0f, 1, 1.0f, 0.0f, 3.0f));
    EXPECT_EQ(k1.sample(std::vector<float>{1.2f, 0.5f}, Ids{0}), 1);  // 0.4 < 0.5
}

// ---- RNG and determinism -----------------------------------------------------------------------

std::vector<std::int32_t> drawSequence(const SamplingParams& p, int steps) {
    std::mt19937_64 logitRng(1234);  // the same logits for every run
    Sampler sampler(p);
    Ids history = {3, 4, 5};
    std::vector<std::int32_t> out;
    for (int i = 0; i < steps; ++i) {
        const std::vector<float> logits = randomLogits(logitRng, 2000, i % 2 == 0);
        const std::int32_t id = sampler.sample(logits, history);
        out.push_back(id);
        history.push_back(id);
    }
    return out;
}

TEST(SamplerDeterminism, SameSeedSameSequenceDifferentSeedsDiffer) {
    const SamplingParams a = makeParams(1.5f, 100, 0.95f, 0.01f, 1.1f, 42);
    const auto first = drawSequence(a, 200);
    EXPECT_EQ(first, drawSequence(a, 200));
    SamplingParams b = a;
    b.seed = 43;
    const auto second = drawSequence(b, 200);
    EXPECT_NE(first, second);
    // Not just a shifted copy: many positions differ.
    int differing = 0;
    for (std::size_t i = 0; i < first.size(); ++i) differing += first[i] != second[i];
    EXPECT_GT(differing, 100);
    // And the tokens are not all the same one (the sampler really is sampling).
    EXPECT_GT(std::set<std::int32_t>(first.begin(), first.end()).size(), 50u);
}

// The draw, re-derived independently: u = (mt19937_64() >> 11) * 2^-53, and the token is the first
// survivor, walking in increasing id, whose cumulative weight exceeds u * total.
TEST(SamplerDeterminism, DrawIsTheDocumentedInverseCdf) {
    const std::uint64_t seed = 0x5eed5eed5eedULL;
    const std::vector<float> logits = {0.3f, -1.0f, 2.0f, 0.7f, 1.1f, -0.4f, 2.0f, 0.0f};
    const double temperature = 0.9;
    {
        Sampler sampler(plainParams(0.9f, seed));
        std::mt19937_64 rng(seed);
        std::vector<double> w;
        double total = 0;
        for (float v : logits) {
            w.push_back(std::exp((static_cast<double>(v) - 2.0) / temperature));
            total += w.back();
        }
        for (int i = 0; i < 2000; ++i) {
            const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
            double cum = 0;
            std::int32_t expected = -1;
            for (std::size_t j = 0; j < w.size(); ++j) {
                cum += w[j];
                if (u * total < cum) {
                    expected = static_cast<std::int32_t>(j);
                    break;
                }
            }
            ASSERT_EQ(sampler.sample(logits, {}), expected) << "draw " << i;
        }
    }
    {
        Sampler sampler(makeParams(0.9f, 3, 1.0f, 0.0f, 1.0f, seed));
        std::mt19937_64 rng(seed);
        // Top-3 keeps ids 2 (2.0), 6 (2.0) and 4 (1.1); the draw walks them in id order.
        const std::vector<std::int32_t> order = {2, 4, 6};
        const std::vector<double> w = {1.0, std::exp((1.1f - 2.0) / temperature), 1.0};
        const double total = w[0] + w[1] + w[2];
        for (int i = 0; i < 2000; ++i) {
            const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
            const double target = u * total;
            const std::int32_t expected = target < w[0]          ? order[0]
                                          : target < w[0] + w[1] ? order[1]
                                                                 : order[2];
            ASSERT_EQ(sampler.sample(logits, {}), expected) << "draw " << i;
        }
    }
}

// Each non-greedy call uses exactly one RNG output, whatever the logits did (a degenerate row, a
// single surviving token), so earlier steps cannot shift later ones.
TEST(SamplerDeterminism, OneRngOutputPerCall) {
    const std::vector<float> normal = {0.1f, 0.2f, 0.3f, 0.0f, -0.2f, 0.25f};
    const std::vector<std::vector<float>> firsts = {
        {kNaN, -kInf},             // all impossible
        {5.0f, -kInf, -kInf},      // one possible token
        {0.0f, 0.0f, 0.0f, 0.0f},  // uniform
    };
    std::vector<std::int32_t> reference;
    {
        Sampler s(plainParams(1.0f, 77));
        s.sample(normal, {});
        for (int i = 0; i < 50; ++i) reference.push_back(s.sample(normal, {}));
    }
    for (const auto& first : firsts) {
        Sampler s(plainParams(1.0f, 77));
        s.sample(first, {});
        std::vector<std::int32_t> rest;
        for (int i = 0; i < 50; ++i) rest.push_back(s.sample(normal, {}));
        EXPECT_EQ(rest, reference);
    }
    // distribution() never touches the RNG.
    Sampler s(plainParams(1.0f, 77));
    s.distribution(normal, {});
    s.sample(normal, {});
    std::vector<std::int32_t> rest;
    for (int i = 0; i < 50; ++i) rest.push_back(s.sample(normal, {}));
    EXPECT_EQ(rest, reference);
}

// ---- non-finite logits -------------------------------------------------------------------------

TEST(SamplerNonFinite, ImpossibleTokensAreNeverDrawn) {
    std::vector<float> logits(64, 0.0f);
    for (std::size_t i = 0; i < logits.size(); i += 2) logits[i] = i % 4 == 0 ? kNaN : -kInf;
    Sampler s(plainParams(2.0f, 9));
    std::set<std::int32_t> seen;
    for (int i = 0; i < 5000; ++i) {
        const std::int32_t id = s.sample(logits, Ids{1, 2, 3});
        ASSERT_EQ(id % 2, 1) << id;
        seen.insert(id);
    }
    EXPECT_EQ(seen.size(), 32u);
}

TEST(SamplerNonFinite, AllImpossibleGivesZeroAndEmptyGivesMinusOne) {
    Sampler s(makeParams(1.0f, 10, 0.9f, 0.1f, 1.3f, 1));
    EXPECT_EQ(s.sample(std::vector<float>{kNaN, -kInf, kNaN}, Ids{0, 1}), 0);
    EXPECT_EQ(s.sample(std::vector<float>(1000, -kInf), {}), 0);
    const auto dist = s.distribution(std::vector<float>{kNaN, kNaN}, {});
    ASSERT_EQ(dist.size(), 1u);
    EXPECT_EQ(dist[0].id, 0);
    EXPECT_EQ(s.sample(std::span<const float>{}, {}), -1);
    EXPECT_TRUE(s.distribution(std::span<const float>{}, {}).empty());
}

// An extreme penalty overflows a logit: to -inf (impossible) or to +inf (takes all the mass).
TEST(SamplerNonFinite, PenaltyOverflow) {
    const std::vector<float> negative = {-3e38f, -3e38f, -1e10f};  // times 1e30: all below -FLT_MAX
    for (int k : {0, 1, 2}) {
        Sampler down(makeParams(1.0f, k, 1.0f, 0.0f, 1e30f, 3));
        for (int i = 0; i < 20; ++i) EXPECT_EQ(down.sample(negative, Ids{0, 1}), 2) << "k " << k;
        EXPECT_EQ(down.sample(negative, Ids{0, 1, 2}), 0) << "all impossible, k " << k;
    }
    Sampler up(makeParams(1.0f, 0, 1.0f, 0.0f, 1e-30f, 3));
    const std::vector<float> positive = {3e38f, 3e38f};
    for (int i = 0; i < 20; ++i) EXPECT_EQ(up.sample(positive, Ids{1}), 1);
}

TEST(SamplerNonFinite, PositiveInfinityTakesAllTheMass) {
    const std::vector<float> logits = {1e30f, kInf, 3.0f, kInf, kNaN};
    Sampler s(plainParams(1.0f, 2));
    const auto dist = asMap(s.distribution(logits, {}));
    EXPECT_EQ(dist.at(1), 0.5);
    EXPECT_EQ(dist.at(3), 0.5);
    EXPECT_EQ(dist.at(0), 0.0);
    int ones = 0;
    for (int i = 0; i < 10000; ++i) {
        const std::int32_t id = s.sample(logits, {});
        ASSERT_TRUE(id == 1 || id == 3) << id;
        ones += id == 1;
    }
    EXPECT_NEAR(ones / 10000.0, 0.5, 0.03);  // 6 sigma of a fair coin over 10k flips
}

// ---- statistics ------------------------------------------------------------------------------

// 200,000 draws from 10 tokens. Under a correct sampler the chi-square statistic follows a
// chi-square law with 9 degrees of freedom: P(chi2 > 45) = 9.2e-7, so a correct sampler fails this
// for fewer than one seed in a million (the seed is fixed, so the test is deterministic). Each
// frequency is also held to 5 standard errors, sqrt(p(1-p)/N) (two-sided tail 5.7e-7 per token).
// The same statistic against softmax(logits) at T = 1, i.e. a sampler that ignored the
// temperature, is in the thousands: the check has the power to catch such a bug.
TEST(SamplerStatistics, EmpiricalDistributionMatchesSoftmaxWithTemperature) {
    const std::vector<float> logits = {2.0f,  1.5f,  1.0f, 0.5f, 0.0f,
                                       -0.5f, -1.0f, 0.8f, 1.2f, -0.2f};
    const float temperature = 0.7f;
    const int draws = 200000;
    Sampler s(plainParams(temperature, 20240601));
    std::vector<int> counts(logits.size(), 0);
    for (int i = 0; i < draws; ++i) ++counts[static_cast<std::size_t>(s.sample(logits, {}))];
    const std::vector<double> p = softmax(logits, temperature);
    EXPECT_LT(chiSquare(counts, p, draws), 45.0);
    for (std::size_t i = 0; i < p.size(); ++i) {
        const double sigma = std::sqrt(p[i] * (1 - p[i]) / draws);
        EXPECT_NEAR(counts[i] / static_cast<double>(draws), p[i], 5 * sigma) << "token " << i;
    }
    EXPECT_GT(chiSquare(counts, softmax(logits, 1.0), draws), 1000.0);
}

// Top-p 0.6 over the same row keeps the 3 largest tokens (ids 0, 1, 8: the first two hold 0.599 of
// the mass, three hold 0.727). Draws must follow the kept probabilities renormalised to 1:
// chi-square with 2 degrees of freedom, P(chi2 > 28) = 8.3e-7; no draw may fall outside the kept
// set. Drawing from the unrenormalised probabilities would put mass on dropped tokens and fail the
// set check; renormalising over the wrong set would fail the chi-square.
TEST(SamplerStatistics, TopPDrawsFollowTheRenormalisedPrefix) {
    const std::vector<float> logits = {2.0f,  1.5f,  1.0f, 0.5f, 0.0f,
                                       -0.5f, -1.0f, 0.8f, 1.2f, -0.2f};
    const float temperature = 0.7f;
    const std::vector<double> full = softmax(logits, temperature);
    const std::vector<std::size_t> kept = {0, 1, 8};
    double keptMass = 0;
    for (std::size_t id : kept) keptMass += full[id];
    ASSERT_LT(keptMass - full[8], 0.6);  // two tokens are not enough ...
    ASSERT_GE(keptMass, 0.6);            // ... three are

    Sampler s(makeParams(temperature, 0, 0.6f, 0.0f, 1.0f, 777));
    const auto dist = asMap(s.distribution(logits, {}));
    ASSERT_EQ(dist.size(), kept.size());
    for (std::size_t id : kept)
        EXPECT_NEAR(dist.at(static_cast<std::int32_t>(id)), full[id] / keptMass, 1e-12);

    const int draws = 200000;
    std::vector<int> counts(logits.size(), 0);
    for (int i = 0; i < draws; ++i) ++counts[static_cast<std::size_t>(s.sample(logits, {}))];
    std::vector<int> keptCounts;
    std::vector<double> keptProbs;
    int outside = draws;
    for (std::size_t id : kept) {
        keptCounts.push_back(counts[id]);
        keptProbs.push_back(full[id] / keptMass);
        outside -= counts[id];
    }
    EXPECT_EQ(outside, 0);
    EXPECT_LT(chiSquare(keptCounts, keptProbs, draws), 28.0);
}

// ---- vocabulary of Gemma's size ----------------------------------------------------------------

TEST(SamplerLargeVocab, GemmaSizedRowMatchesReference) {
    std::mt19937_64 rng(262144);
    const std::vector<float> logits = randomLogits(rng, 262144, false);
    Ids history;
    for (int i = 0; i < 500; ++i) history.push_back(static_cast<std::int32_t>(rng() % 262144));
    const std::vector<SamplingParams> configs = {
        makeParams(1.0f, 64, 0.95f, 0.0f, 1.1f),  // Gemma's defaults plus a penalty
        makeParams(1.0f, 0, 0.95f, 0.0f),
        makeParams(2.0f, 0, 1.0f, 0.05f),
        makeParams(0.7f, 5000, 0.9f, 0.01f, 1.3f),
        makeParams(8.0f, 0, 0.9f, 0.0f, 1.2f),  // flat: top-p through the histogram
    };
    for (const SamplingParams& p : configs) {
        Sampler s(p);
        expectSameDistribution(asMap(s.distribution(logits, history)),
                               referenceDistribution(logits, history, p));
        // Reusing the buffers for another row of the same size gives the same answer as new ones.
        const std::int32_t a = s.sample(logits, history);
        Sampler fresh(p);
        fresh.distribution(std::vector<float>(17, 1.0f), {});
        EXPECT_EQ(a, fresh.sample(logits, history));
    }
}

}  // namespace
}  // namespace gemma

TEST(SamplerPlainArgmax, OnlyValidGreedyWithoutPenalty) {
    gemma::SamplingParams p;
    EXPECT_FALSE(gemma::Sampler::isPlainArgmax(p));  // the defaults sample
    p.greedy = true;
    EXPECT_TRUE(gemma::Sampler::isPlainArgmax(p));
    p.repeatPenalty = 1.1f;
    EXPECT_FALSE(gemma::Sampler::isPlainArgmax(p));
    p = gemma::SamplingParams{};
    p.temperature = 0.0f;
    EXPECT_TRUE(gemma::Sampler::isPlainArgmax(p));
    p.topP = 0.0f;  // invalid: create() refuses it, so nothing may bypass the sampler
    EXPECT_FALSE(gemma::Sampler::isPlainArgmax(p));
}

namespace gemma {
namespace {

// sampleFromBest (the device top-k path) must be sample() itself: the same ids and the same RNG
// advance on every row, given the row's bestCount best entries. Rows with heavy ties (values on
// a coarse grid, so the top-k boundary falls inside a tie), -inf and NaN entries (fewer possible
// tokens than k, exactly k, k + 1), ±0, +inf, and vocabularies shorter than k + 1.
TEST(SamplerFromBest, SameDrawsAsTheWholeRow) {
    std::mt19937_64 rng(7);
    const std::vector<int> vocabs = {1, 2, 5, 63, 64, 65, 66, 300, 4096};
    const std::vector<gemma::SamplingParams> settings = {
        [] { gemma::SamplingParams p; return p; }(),  // the defaults: T 1, k 64, p 0.95
        [] { gemma::SamplingParams p; p.topK = 1; return p; }(),
        [] { gemma::SamplingParams p; p.topK = 2; p.topP = 1.0f; return p; }(),
        [] { gemma::SamplingParams p; p.topK = 40; p.topP = 0.5f; p.minP = 0.05f; p.temperature = 0.7f; return p; }(),
        [] { gemma::SamplingParams p; p.topK = 64; p.topP = 1.0f; p.temperature = 2.5f; return p; }(),
        [] { gemma::SamplingParams p; p.topK = 7; p.topP = 0.9f; p.minP = 0.2f; p.temperature = 1.3f; return p; }(),
    };
    std::vector<gemma::RankedLogit> best;
    int rows = 0;
    for (std::size_t s = 0; s < settings.size(); ++s) {
        gemma::SamplingParams params = settings[s];
        params.seed = 1000 + s;
        ASSERT_TRUE(gemma::Sampler::samplesFromBest(params));
        for (const int vocab : vocabs) {
            gemma::Sampler whole(params), fromBest(params);
            for (int draw = 0; draw < 40; ++draw, ++rows) {
                std::vector<float> row(static_cast<std::size_t>(vocab));
                const int grid = draw % 3 == 0 ? 4 : 64;  // coarse grids make many equal logits
                for (auto& v : row) v = static_cast<float>(std::uniform_int_distribution<int>(-grid, grid)(rng)) / 8.0f;
                // A share of impossible entries: none, some, or nearly all (possible < k).
                const int impossible = draw % 4 == 1 ? vocab / 3 : draw % 4 == 2 ? std::max(0, vocab - 3) : 0;
                for (int i = 0; i < impossible; ++i) {
                    const auto at = static_cast<std::size_t>(std::uniform_int_distribution<int>(0, vocab - 1)(rng));
                    row[at] = i % 2 ? -kInf : kNaN;
                }
                if (draw % 5 == 3) row[static_cast<std::size_t>(vocab / 2)] = -0.0f;
                if (draw == 17) row[0] = kInf;
                gemma::Sampler::bestOf(row, gemma::Sampler::bestCount(params), best);
                ASSERT_EQ(best.size(), std::min<std::size_t>(row.size(), static_cast<std::size_t>(params.topK + 1)));
                const std::int32_t expected = whole.sample(row, Ids{});
                ASSERT_EQ(fromBest.sampleFromBest(best), expected)
                    << "setting " << s << ", vocab " << vocab << ", draw " << draw;
            }
        }
    }
    EXPECT_EQ(rows, static_cast<int>(settings.size() * vocabs.size() * 40));
}

TEST(SamplerFromBest, BestOfOrderAndSupportedParameters) {
    std::vector<gemma::RankedLogit> best;
    gemma::Sampler::bestOf(std::vector<float>{1.0f, kNaN, 3.0f, -0.0f, 3.0f, -kInf, 0.0f}, 5, best);
    ASSERT_EQ(best.size(), 5u);
    const Ids ids = {2, 4, 0, 3, 6};  // 3 (lower id first), 1, then ±0 ranked as equals by id
    for (std::size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(best[i].id, ids[i]) << i;
    EXPECT_FALSE(std::signbit(best[3].logit));  // -0 is reported as +0
    gemma::Sampler::bestOf(std::vector<float>{kNaN, -kInf}, 5, best);
    ASSERT_EQ(best.size(), 2u);
    EXPECT_EQ(best[0].id, 0);  // both impossible: by id
    EXPECT_EQ(best[0].logit, -kInf);

    gemma::SamplingParams p;
    EXPECT_TRUE(gemma::Sampler::samplesFromBest(p));  // the defaults
    EXPECT_EQ(gemma::Sampler::bestCount(p), 65);
    p.topK = 0;
    EXPECT_FALSE(gemma::Sampler::samplesFromBest(p));  // the whole row can survive
    p.topK = gemma::Sampler::kMaxBestTopK + 1;
    EXPECT_FALSE(gemma::Sampler::samplesFromBest(p));
    p.topK = 10;
    p.repeatPenalty = 1.2f;
    EXPECT_FALSE(gemma::Sampler::samplesFromBest(p));  // the penalty reorders the row
    p.repeatPenalty = 1.0f;
    p.greedy = true;
    EXPECT_FALSE(gemma::Sampler::samplesFromBest(p));  // greedy has its own device path
    gemma::Sampler all(gemma::SamplingParams{});
    EXPECT_EQ(all.sampleFromBest({}), -1);
}

}  // namespace
}  // namespace gemma
