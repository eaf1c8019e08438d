// Host emulation of the tensor-core attention pieces' roundings, for test_attention's fused-pieces
// fixtures (the tolerance of their "vs FP64" check, kFusedPiecesRelTol / kFusedPiecesAbsTol there).
// Not built by CMake (no GPU, no project code); run by hand:
//   g++ -O2 -o /tmp/emulate tests/kernels/emulate_pieces_rounding.cpp
//   /tmp/emulate HEAD_DIM Q_HEADS KV_HEADS POSITION SEEDS     e.g. /tmp/emulate 512 16 8 128 300
// Inputs as the harness draws them: cached keys and values U(−1,1) (fp32 cache), the current
// position's k and q RMS-normed with weights U(−w,w), w = min(1, sqrt(6/sqrt(d))), v normed
// unweighted. The kernel's roundings: q, K, V to fp16, scores accumulated in fp32, P = exp(s − m)
// to fp16 with m the max of its 64-key tile, O and l in fp32, tiles merged in fp32. RoPE is left
// out (a rotation: the norms, hence the score distribution, stay). Prints, over the seeds, the
// relative L2 error and max|out − ref| / max|ref| against the exact attention (double).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

namespace {

float toHalf(float x) { return static_cast<float>(static_cast<_Float16>(x)); }

std::vector<float> rmsNormed(std::vector<float> x, const std::vector<float>* weight) {
    double sumSquares = 0;
    for (float v : x) sumSquares += static_cast<double>(v) * v;
    const double inverse = 1 / std::sqrt(sumSquares / static_cast<double>(x.size()) + 1e-6);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(x[i] * inverse * (weight ? (*weight)[i] : 1.0));
    return x;
}

void printQuantiles(const char* what, std::vector<double> v) {
    std::sort(v.begin(), v.end());
    std::printf("  %-22s median %.2e  p90 %.2e  p99 %.2e  max %.2e\n", what, v[v.size() / 2], v[v.size() * 9 / 10],
                v[v.size() * 99 / 100], v.back());
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 6) {
        std::fprintf(stderr, "usage: %s HEAD_DIM Q_HEADS KV_HEADS POSITION SEEDS\n", argv[0]);
        return 2;
    }
    const int d = std::atoi(argv[1]), qHeads = std::atoi(argv[2]), kvHeads = std::atoi(argv[3]);
    const int position = std::atoi(argv[4]), seeds = std::atoi(argv[5]);
    if (d <= 0 || kvHeads <= 0 || qHeads % kvHeads != 0 || position < 0 || seeds <= 0) {
        std::fprintf(stderr, "bad arguments\n");
        return 2;
    }
    const double weightScale = std::min(1.0, std::sqrt(6.0 / std::sqrt(static_cast<double>(d))));
    const int keys = position + 1, group = qHeads / kvHeads;
    std::vector<double> relL2, maxRelative;
    for (int seed = 0; seed < seeds; ++seed) {
        std::mt19937_64 rng(static_cast<std::uint64_t>(seed));
        std::uniform_real_distribution<float> uniform(-1.f, 1.f);
        auto at = [&](int key, int head, int i) { return (static_cast<std::size_t>(key) * kvHeads + head) * d + i; };
        std::vector<float> K(static_cast<std::size_t>(keys) * kvHeads * d), V(K.size());
        for (auto& x : K) x = uniform(rng);
        for (auto& x : V) x = uniform(rng);
        std::vector<float> qWeight(d), kWeight(d);
        for (auto& x : qWeight) x = static_cast<float>(uniform(rng) * weightScale);
        for (auto& x : kWeight) x = static_cast<float>(uniform(rng) * weightScale);
        for (int head = 0; head < kvHeads; ++head) {
            std::vector<float> k(d), v(d);
            for (auto& x : k) x = 3 * uniform(rng);
            for (auto& x : v) x = 3 * uniform(rng);
            k = rmsNormed(k, &kWeight);
            v = rmsNormed(v, nullptr);
            for (int i = 0; i < d; ++i) K[at(position, head, i)] = k[i], V[at(position, head, i)] = v[i];
        }
        double maxError = 0, maxReference = 0, errorSquares = 0, referenceSquares = 0;
        for (int h = 0; h < qHeads; ++h) {
            std::vector<float> q(d);
            for (auto& x : q) x = 3 * uniform(rng);
            q = rmsNormed(q, &qWeight);
            const int kvHead = h / group;
            std::vector<double> exact(keys);
            std::vector<float> rounded(keys);
            double largest = -INFINITY;
            for (int t = 0; t < keys; ++t) {
                double s = 0;
                float s32 = 0;
                for (int i = 0; i < d; ++i) {
                    s += static_cast<double>(q[i]) * K[at(t, kvHead, i)];
                    s32 += toHalf(q[i]) * toHalf(K[at(t, kvHead, i)]);
                }
                exact[t] = s;
                rounded[t] = s32;
                largest = std::max(largest, s);
            }
            double sum = 0;
            for (int t = 0; t < keys; ++t) sum += std::exp(exact[t] - largest);
            std::vector<float> out(d, 0.f);
            float l = 0, m = -INFINITY;
            for (int first = 0; first < keys; first += 64) {
                const int end = std::min(keys, first + 64);
                float tileMax = -INFINITY, tileSum = 0;
                for (int t = first; t < end; ++t) tileMax = std::max(tileMax, rounded[t]);
                std::vector<float> tileOut(d, 0.f);
                for (int t = first; t < end; ++t) {
                    const float p = std::exp(rounded[t] - tileMax);
                    tileSum += p;
                    for (int i = 0; i < d; ++i) tileOut[i] += toHalf(p) * toHalf(V[at(t, kvHead, i)]);
                }
                const float merged = std::max(m, tileMax), a = std::exp(m - merged), b = std::exp(tileMax - merged);
                for (int i = 0; i < d; ++i) out[i] = out[i] * a + tileOut[i] * b;
                l = l * a + tileSum * b;
                m = merged;
            }
            for (int i = 0; i < d; ++i) {
                double reference = 0;
                for (int t = 0; t < keys; ++t) reference += std::exp(exact[t] - largest) * V[at(t, kvHead, i)];
                reference /= sum;
                const double error = out[i] / l - reference;
                maxError = std::max(maxError, std::fabs(error));
                maxReference = std::max(maxReference, std::fabs(reference));
                errorSquares += error * error;
                referenceSquares += reference * reference;
            }
        }
        relL2.push_back(std::sqrt(errorSquares / referenceSquares));
        maxRelative.push_back(maxError / maxReference);
    }
    std::printf("d %d, %d q heads / %d kv heads, position %d, %d seeds:\n", d, qHeads, kvHeads, position, seeds);
    printQuantiles("relative L2", relL2);
    printQuantiles("max|err| / max|ref|", maxRelative);
    return 0;
}
