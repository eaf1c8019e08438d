// gemma-quantize: Hugging Face Gemma 4 folder → one Gemma Desk package (docs/PACKAGE_FORMAT.md).
#include <cstdio>
#include <iostream>

#include "CommandLine.h"
#include "gemma/Quantize.h"

int main(int argc, char** argv) {
    gemma::cli::CommandLine cli(
        "gemma-quantize", "INPUT_DIR -o OUTPUT_FILE [--unquantized] [--scale-rule absmax|minimum-error]",
        {{"o", true, "the package file to write", "OUTPUT_FILE"},
         {"output", true, "same as -o", "OUTPUT_FILE"},
         {"unquantized", false, "keep every tensor in float32 (parity work)"},
         {"scale-rule", true, "how FP4 group scales are chosen: minimum-error (default) or absmax", "RULE"},
         {"quiet", false, "no progress output"}});
    // Accept the conventional single-dash -o.
    std::vector<char*> args(argv, argv + argc);
    std::string dashO = "--o";
    for (auto& arg : args) {
        if (std::string(arg) == "-o") arg = dashO.data();
    }
    if (auto exitCode = cli.parseStandard(static_cast<int>(args.size()), args.data())) return *exitCode;
    const auto output = cli.value("o") ? cli.value("o") : cli.value("output");
    if (cli.positional().size() != 1 || !output) {
        std::cerr << "gemma-quantize: need one INPUT_DIR and -o OUTPUT_FILE (see --help)\n";
        return 1;
    }
    gemma::QuantizeOptions options;
    options.unquantized = cli.has("unquantized");
    const std::string rule = cli.value("scale-rule").value_or("minimum-error");
    if (rule == "absmax") options.scaleRule = gemma::ScaleRule::AbsMax;
    else if (rule == "minimum-error") options.scaleRule = gemma::ScaleRule::MinimumError;
    else {
        std::cerr << "gemma-quantize: --scale-rule must be absmax or minimum-error, got '" << rule << "'\n";
        return 1;
    }
    const bool quiet = cli.has("quiet");
    int lastPercent = -1;
    auto report = gemma::quantizeCheckpoint(cli.positional().front(), *output, options,
                                            [&](double fraction, std::string_view stage) {
                                                const int percent = static_cast<int>(fraction * 100.0);
                                                if (!quiet && percent != lastPercent) {
                                                    lastPercent = percent;
                                                    std::fprintf(stderr, "\r[%3d%%] %-70.70s", percent, std::string(stage).c_str());
                                                    std::fflush(stderr);
                                                }
                                                return true;
                                            });
    if (!quiet) std::fprintf(stderr, "\n");
    if (!report) {
        std::cerr << "gemma-quantize: " << report.status().message() << "\n";
        return 1;
    }
    if (!quiet) {
        std::fprintf(stderr, "wrote %s: %lld tensors, %.1f MB\n", output->c_str(), static_cast<long long>(report->tensors),
                     static_cast<double>(report->outputBytes) / 1e6);
    }
    return 0;
}
