// The CPU backend: the whole forward pass in FP32 over the plain-C++ reference ops. It is the
// oracle the CUDA backend is checked against, and the fallback where no GPU exists.
#pragma once

#include <memory>

#include "Backend.h"
#include "ModelWeights.h"
#include "Package.h"

namespace gemma {

std::unique_ptr<Backend> makeCpuBackend(const Package& package, const ModelWeights& weights);

}  // namespace gemma
