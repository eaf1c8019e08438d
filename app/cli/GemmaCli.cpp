// gemma-cli: generate from a Gemma Desk package on the command line. The contract other tools
// and tests rely on (README "gemma-cli"): text streams to stdout, errors go to stderr with a
// non-zero exit, --dump-logits writes little-endian float32 rows of `vocab` values.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "CommandLine.h"
#include "gemma/Engine.h"

namespace {

int fail(const std::string& message) {
    std::cerr << "gemma-cli: " << message << "\n";
    return 1;
}

bool parseIds(const std::string& text, std::vector<std::int32_t>& ids, std::string& error) {
    std::stringstream stream(text);
    std::string item;
    while (std::getline(stream, item, ',')) {
        char* end = nullptr;
        const long value = std::strtol(item.c_str(), &end, 10);
        if (item.empty() || *end != '\0' || value < 0 || value > 0x7FFFFFFF) {
            error = "--tokens must be comma-separated non-negative ids, got '" + item + "'";
            return false;
        }
        ids.push_back(static_cast<std::int32_t>(value));
    }
    if (ids.empty()) {
        error = "--tokens needs at least one id";
        return false;
    }
    return true;
}

}  // namespace

int main(int argc, char** argv) {
    using gemma::cli::OptionSpec;
    gemma::cli::CommandLine cli(
        "gemma-cli", "[--model PKG] (--prompt TEXT | --tokens ID,ID,...) [options]",
        {{"model", true, "Gemma Desk package (default: the embedded default model)", "PKG"},
         {"prompt", true, "user message, rendered with the model's chat format", "TEXT"},
         {"system", true, "system prompt for --prompt", "TEXT"},
         {"tokens", true, "raw token ids fed as they are (no template, no BOS added)", "ID,ID,..."},
         {"max-new-tokens", true, "tokens to generate (default 256)", "N"},
         {"greedy", false, "always pick the most likely token"},
         {"temperature", true, "sampling temperature (default 1.0)", "T"},
         {"top-k", true, "keep the K most likely tokens; 0 disables (default 64)", "K"},
         {"top-p", true, "nucleus mass (default 0.95)", "P"},
         {"min-p", true, "drop tokens below M x the top probability (default 0)", "M"},
         {"repeat-penalty", true, "repetition penalty; 1 disables (default 1)", "R"},
         {"seed", true, "random seed (default 0)", "S"},
         {"ignore-eos", false, "do not stop at end-of-turn / EOS tokens"},
         {"print-ids", false, "print the generated ids, comma-separated, on one line"},
         {"dump-logits", true, "write float32 logits of every prompt position and generated token", "FILE"},
         {"device", true, "cpu, cuda or auto (default auto)", "DEVICE"},
         {"context", true, "KV-cache allocation in positions (default 4096)", "N"},
         {"kv-cache", true, "GPU KV-cache element type: f16 (default: every layer in fp16), full-f16 (fp16 on full-attention layers, f32 on sliding ones), f32 or bf16", "TYPE"},
         {"no-gemm-prefill", false, "GPU: prefill with the FP4 matvec kernels instead of cuBLASLt GEMMs"},
         {"no-pdl", false, "GPU: launch the decode kernels without programmatic dependent launch (on by default on sm_90+)"},
         {"fp16-matvec", false, "GPU: FP4 matvecs take x as fp16 hi + lo instead of integers (the earlier form)"},
         {"row-layout", false, "GPU: keep the FP4 weights in the package's row layout instead of the tiled layout"},
         {"separate-attention", false, "GPU: run a decode step's attention as three launches instead of one fused launch"},
         {"separate-norms", false, "GPU: run a decode step's residual norms as their own kernels instead of inside the matvecs"},
         {"cuda-core-attention", false, "GPU: run the decode attention of full layers with large query groups on the fp32 CUDA-core kernel instead of tensor cores"},
         {"thread-copies", false, "GPU: stage the decode's tensor-core attention pieces' K/V with every thread's cp.async instead of bulk copies (the same results; for compute-sanitizer racecheck)"},
         {"split-attention", false, "GPU: run the fused decode attention of sliding layers on the split kernel instead of thread-block clusters"},
         {"quiet", false, "do not print statistics to stderr"}});
    if (auto exitCode = cli.parseStandard(argc, argv)) return *exitCode;
    if (!cli.positional().empty()) return fail("unexpected argument '" + cli.positional().front() + "' (see --help)");
    if (cli.has("prompt") == cli.has("tokens")) return fail("give exactly one of --prompt and --tokens (see --help)");

    gemma::OpenOptions options;
    std::int64_t context = 4096, maxNew = 256, topK = 64, seed = 0;
    double temperature = 1.0, topP = 0.95, minP = 0.0, repeatPenalty = 1.0;
    if (!cli.getInt("context", 1, 1 << 20, context) || !cli.getInt("max-new-tokens", 0, 1 << 20, maxNew) ||
        !cli.getInt("top-k", 0, 1 << 24, topK) || !cli.getInt("seed", 0, INT64_MAX, seed) ||
        !cli.getFloat("temperature", 0.0, 100.0, temperature) || !cli.getFloat("top-p", 0.0, 1.0, topP) ||
        !cli.getFloat("min-p", 0.0, 1.0, minP) || !cli.getFloat("repeat-penalty", 0.01, 100.0, repeatPenalty)) {
        return fail(cli.error());
    }
    options.contextAllocation = static_cast<int>(context);
    const std::string device = cli.value("device").value_or("auto");
    if (device == "cpu") options.device = gemma::Device::Cpu;
    else if (device == "cuda") options.device = gemma::Device::Cuda;
    else if (device == "auto") options.device = gemma::Device::Auto;
    else return fail("--device must be cpu, cuda or auto, got '" + device + "'");

    const std::string kvCache = cli.value("kv-cache").value_or(gemma::kvCacheTypeName(options.kvCache));
    if (!gemma::parseKvCacheType(kvCache, options.kvCache)) return fail("--kv-cache must be full-f16, f32, f16 or bf16, got '" + kvCache + "'");
    if (cli.has("no-gemm-prefill")) options.prefillGemmMinRows = 0;
    if (cli.has("no-pdl")) options.programmaticLaunch = false;
    if (cli.has("fp16-matvec")) options.integerMatvec = false;
    if (cli.has("row-layout")) options.tiledWeights = false;
    if (cli.has("separate-attention")) options.fusedAttention = false;
    if (cli.has("separate-norms")) options.fusedNorms = false;
    if (cli.has("cuda-core-attention")) options.tensorCoreAttention = false;
    if (cli.has("split-attention")) options.clusterAttention = false;
    if (cli.has("thread-copies")) options.bulkCopies = false;

    std::filesystem::path model = cli.value("model").value_or("");
    if (model.empty()) model = gemma::cli::defaultModelPath();
    if (model.empty()) return fail("no --model given and no embedded default model was found");

    gemma::GenerationRequest request;
    request.maxNewTokens = static_cast<int>(maxNew);
    request.stopAtEndOfTurn = !cli.has("ignore-eos");
    auto& s = request.sampling;
    s.greedy = cli.has("greedy");
    s.temperature = static_cast<float>(temperature);
    s.topK = static_cast<int>(topK);
    s.topP = static_cast<float>(topP);
    s.minP = static_cast<float>(minP);
    s.repeatPenalty = static_cast<float>(repeatPenalty);
    s.seed = static_cast<std::uint64_t>(seed);
    if (auto prompt = cli.value("prompt")) {
        if (auto system = cli.value("system")) request.messages.push_back({gemma::Role::System, *system});
        request.messages.push_back({gemma::Role::User, *prompt});
    } else {
        std::string error;
        if (!parseIds(*cli.value("tokens"), request.rawTokens, error)) return fail(error);
    }

    std::ofstream logitsFile;
    if (auto path = cli.value("dump-logits")) {
        logitsFile.open(*path, std::ios::binary | std::ios::trunc);
        if (!logitsFile) return fail("cannot write '" + *path + "'");
        request.onLogits = [&logitsFile](std::int32_t, const float* row, std::int32_t vocab) {
            logitsFile.write(reinterpret_cast<const char*>(row), static_cast<std::streamsize>(vocab) * 4);
        };
    }

    auto engine = gemma::Engine::open(model, options);
    if (!engine) return fail(engine.status().message());
    auto stats = (*engine)->generate(request, [](const gemma::TokenEvent& event) {
        std::fwrite(event.text.data(), 1, event.text.size(), stdout);
        std::fflush(stdout);
        return true;
    });
    if (!stats) return fail(stats.status().message());
    std::cout << "\n";
    if (cli.has("print-ids")) {
        for (std::size_t i = 0; i < stats->tokens.size(); ++i) std::cout << (i ? "," : "") << stats->tokens[i];
        std::cout << "\n";
    }
    if (logitsFile.is_open()) {
        logitsFile.close();
        if (!logitsFile) return fail("writing the logits file failed");
    }
    std::cout.flush();
    if (!cli.has("quiet")) {
        std::fprintf(stderr, "[%s | %s] prompt %d tokens, prefill %.1f ms, generated %d tokens, %.2f tok/s, stop: %s\n",
                     (*engine)->info().name.c_str(), (*engine)->info().backend.c_str(), stats->promptTokens, stats->prefillMs,
                     stats->generatedTokens, stats->decodeTokensPerSecond, gemma::stopReasonName(stats->stopReason));
    }
    return 0;
}
