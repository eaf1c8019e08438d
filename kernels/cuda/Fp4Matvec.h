// FP4-E2M1 group-128 matvec (y = W·x) and its fused gate/up GeGLU variant. See Fp4Matvec.cu.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "KernelStatus.h"

namespace gemma::cuda {

struct Fp4MatvecParams {
    // W[out][in] in FP4-E2M1 group 128 (kernels/include/kernels/WeightFormats.h):
    // codes  [out][fp4RowBytes(in)] bytes, 16-byte aligned base;
    // scales [out][fp4GroupsPerRow(in)] BF16 bits.
    const std::uint8_t* codes = nullptr;
    const std::uint16_t* scales = nullptr;
    // GeGLU only: the up projection, same shape and format as (codes, scales) = the gate.
    const std::uint8_t* upCodes = nullptr;
    const std::uint16_t* upScales = nullptr;
    std::int64_t out = 0;
    std::int64_t in = 0;
    // x: fp32 activations [rows][xStride], x[r][i] for i < in; never read at i >= in.
    // Base 16-byte aligned, xStride a multiple of 4.
    const float* x = nullptr;
    std::int64_t xStride = 0;
    // y: fp32 [rows][yStride], y[r][o] for o < out.
    float* y = nullptr;
    std::int64_t yStride = 0;
    int rows = 1;  // batch of input vectors; any count >= 1 (processed 4 at a time)
    // Up to two more weights of the same `in`, computed on the same x in the same launch (a
    // layer's q, k and v projections: one weight stream instead of three small ones). Each has
    // its own codes/scales/out and writes y[r][o] of its own `y` (row stride yStride, 0 = this
    // call's yStride). Not with GeGLU.
    struct Extra {
        const std::uint8_t* codes = nullptr;
        const std::uint16_t* scales = nullptr;
        std::int64_t out = 0;
        float* y = nullptr;
        std::int64_t yStride = 0;
    };
    Extra extra[2];
    int extraCount = 0;
    // Batch 1 runs on tensor cores (see Fp4Matvec.cu) unless forced onto the fp32 CUDA-core
    // kernel (tests, benchmarks). There x enters the int8 mma as an integer, to 2^-22 of its
    // 128-group's max (its bytes in three B columns, exact int32 sums per group; 7 decode
    // instructions per 8 weights), unless fp16X asks for the earlier form, x as fp16 hi + lo in
    // an fp16 mma (13 per 8; comparisons), or singleHalfX for one fp16 (~2^-12 relative error on x; experiments only).
    bool forceCudaCores = false;
    bool fp16X = false;
    bool singleHalfX = false;
    // Tensor-core path, plain matvec only: each warp's item is two groups instead of one, so the
    // per-item bookkeeping (addresses, tile checks) is paid once per 2 KB. An experiment, off by
    // default: measured on the H200, -15 % to +9 % per shape with fp16 x, -5 % to +12 % with
    // integer x (docs/PERFORMANCE.md).
    bool twoGroupItems = false;
    // The weights (codes, scales, upCodes, upScales and the extras') are in the tiled layout
    // (kernels/include/kernels/Fp4Tiled.h; scales then point at its 32-bit scale words, 4-byte
    // aligned) instead of the row layout; every path reads it, with bit-identical results. The
    // CUDA backend tiles its weights at load (Fp4Tile.cu): the tensor-core kernel's loads become
    // contiguous 512-byte reads. Not with twoGroupItems.
    bool tiled = false;
    // Tensor-core path on sm_90+: launch with programmatic stream serialization, so the kernel may
    // start while the previous kernel in the stream finishes; it prefetches its first weights and
    // waits for that kernel (griddepcontrol.wait) before reading x. Ignored elsewhere. The
    // previous kernel must not need to finish before this one's launch for any other reason.
    bool programmaticLaunch = false;
    // The input norm folded into the matvec (batch 1 on the integer tensor-core path, the
    // default; refused elsewhere). With residualIn set, `x` is not read: every block computes x
    // from the residual stream as launchRmsNormResidual (RmsNorm.h) does with residual =
    // residualIn, branch, branchWeight, layerScalar and outWeight, i.e.
    //   r = (residualIn + rmsNorm(branch; branchWeight)) · layerScalar   (residualIn · layerScalar
    //       without a branch),   x = rmsNorm(r; outWeight),
    // and block 0 writes r to residualOut (skipped when null). A decode step's norm kernels thus
    // disappear into the matvecs that consume them. residualOut must not alias residualIn or
    // branch (every block reads those while block 0 writes): callers alternate two buffers.
    // Requires in % 4 == 0, in <= 4096 (the hidden sizes of 12b, e2b and e4b; 31b's 5376 keeps
    // the norm kernels) and 16-byte aligned vectors.
    struct InputNorm {
        const float* residualIn = nullptr;
        const float* branch = nullptr;
        const float* branchWeight = nullptr;
        float layerScalar = 1.0f;
        const float* outWeight = nullptr;
        float* residualOut = nullptr;
        float eps = 1e-6f;
        // false: x = r itself, without the output norm (outWeight ignored): the per-layer-input
        // block's gate reads the updated residual stream, not a normed copy (GEMMA4.md §2.4).
        bool normalizeOutput = true;
    };
    InputNorm inputNorm;
    static constexpr std::int64_t kInputNormMaxIn = 4096;
    // Optional epilogue (batch 1 on the tensor-core path, the default; one weight, no extras, not
    // with GeGLU; refused elsewhere): y[o] = gelu_tanh((W·x)[o]) · geluGate[o], the per-layer-input
    // gate (GEMMA4.md §2.4: gelu(per_layer_input_gate(h)) ⊙ per-layer input) in the matvec's own
    // store instead of a kernel of its own. geluGate: `out` floats, read after the dependency wait.
    const float* geluGate = nullptr;
    int rowsPerWarp = 0;  // CUDA-core kernel: 0 = chosen from the device; 1, 2 or 4 forces it
    bool forceGlobalX = false;  // CUDA-core kernel: skip the shared-memory copy of x
};

// y = W·x.
KernelStatus launchFp4Matvec(const Fp4MatvecParams& params, cudaStream_t stream);
// y = gelu_tanh(W_gate·x) ⊙ (W_up·x); W_gate = (codes, scales), W_up = (upCodes, upScales).
KernelStatus launchFp4GegluMatvec(const Fp4MatvecParams& params, cudaStream_t stream);

}  // namespace gemma::cuda
