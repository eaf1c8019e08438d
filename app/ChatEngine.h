// The app's view of an inference engine. Everything the desktop app asks of the engine goes
// through this interface so that (a) the app builds and is tested while the real engine is still
// being written and (b) tests can drive the threading and UI with a deterministic fake.
//
// Threading: one ChatEngine is used from the worker thread only, except cancel(), which the GUI
// thread calls to stop a running generate()/benchmarkDecode()/convert()/load().
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gemma/Engine.h"
#include "gemma/Quantize.h"
#include "gemma/Status.h"

namespace desk {

class ChatEngine {
public:
    virtual ~ChatEngine() = default;

    // Opens a package. On failure the previously loaded model (if any) stays loaded, so a bad
    // file never leaves the app without a working model.
    virtual gemma::Status load(const std::filesystem::path& package, const gemma::OpenOptions& options,
                               const gemma::ProgressCallback& progress) = 0;
    virtual void unload() = 0;
    virtual bool isLoaded() const = 0;
    virtual gemma::ModelInfo info() const = 0;

    // What load() would allocate, from the package header alone.
    virtual gemma::Expected<gemma::MemoryEstimate> estimateMemory(const std::filesystem::path& package,
                                                                  const gemma::OpenOptions& options) = 0;

    // Converts a Hugging Face folder into a package (gemma::quantizeCheckpoint in the real engine).
    virtual gemma::Expected<gemma::QuantizeReport> convert(const std::filesystem::path& inputDir,
                                                           const std::filesystem::path& outputFile,
                                                           const gemma::ProgressCallback& progress) = 0;

    virtual gemma::Expected<gemma::GenerationStats> generate(const gemma::GenerationRequest& request,
                                                             const gemma::TokenCallback& onToken) = 0;
    virtual gemma::Expected<gemma::DecodeBenchmarkResult> benchmarkDecode(
        const gemma::DecodeBenchmarkRequest& request, const gemma::ProgressCallback& progress) = 0;

    // Thread-safe; stops the running call at its next token / progress report.
    virtual void cancel() = 0;

    // Measured memory-bandwidth ceiling of the device in GB/s (the real adapter measures it once per
    // load with Engine::measureReadBandwidth); nullopt makes the perf panel say "not measured".
    virtual std::optional<double> measuredBandwidthGBps() const = 0;
};

// Creates the adapter over gemma::Engine (GemmaEngineAdapter.cpp).
std::unique_ptr<ChatEngine> makeGemmaEngine();

// Human-readable names the app uses for gemma enums. Kept app-side so the app does not depend on
// which of the engine's name functions are implemented yet.
const char* bucketLabel(gemma::Bucket bucket);
const char* deviceLabel(gemma::Device device);
const char* stopReasonLabel(gemma::StopReason reason);

// A message for a person: what went wrong and what to do about it, from an engine Status.
std::string describeLoadError(const gemma::Status& status);

}  // namespace desk
