#include "CommandLine.h"

#include "gemma/Engine.h"

#include <cmath>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <unistd.h>

namespace gemma::cli {

CommandLine::CommandLine(std::string program, std::string synopsis, std::vector<OptionSpec> options)
    : program_(std::move(program)), synopsis_(std::move(synopsis)), options_(std::move(options)) {
    options_.push_back({"help", false, "show this help and exit"});
    options_.push_back({"version", false, "show the version and exit"});
}

bool CommandLine::parse(int argc, char** argv) {
    for (int i = 1; i < argc; ++i) {
        std::string arg = argv[i];
        if (arg.rfind("--", 0) != 0 || arg == "--") {
            positional_.push_back(arg);
            continue;
        }
        std::string name = arg.substr(2), value;
        bool inlineValue = false;
        if (const auto eq = name.find('='); eq != std::string::npos) {
            value = name.substr(eq + 1);
            name = name.substr(0, eq);
            inlineValue = true;
        }
        const OptionSpec* spec = nullptr;
        for (const auto& option : options_) {
            if (option.name == name) spec = &option;
        }
        if (!spec) {
            error_ = "unknown option '--" + name + "' (see --help)";
            return false;
        }
        if (spec->takesValue && !inlineValue) {
            if (i + 1 >= argc) {
                error_ = "option '--" + name + "' needs a value";
                return false;
            }
            value = argv[++i];
        } else if (!spec->takesValue && inlineValue) {
            error_ = "option '--" + name + "' takes no value";
            return false;
        }
        values_[name] = value;
    }
    return true;
}

std::optional<int> CommandLine::parseStandard(int argc, char** argv) {
    if (!parse(argc, argv)) {
        std::cerr << program_ << ": " << error_ << "\n";
        return 1;
    }
    if (has("help")) {
        std::cout << helpText();
        return 0;
    }
    if (has("version")) {
        std::cout << program_ << " " << engineVersion() << "\n";
        return 0;
    }
    return std::nullopt;
}

std::string CommandLine::helpText() const {
    std::ostringstream out;
    out << "Usage: " << program_ << " " << synopsis_ << "\n\nOptions:\n";
    for (const auto& option : options_) {
        std::string left = "  --" + option.name + (option.takesValue ? " " + option.valueName : "");
        if (left.size() < 30) left.resize(30, ' ');
        else left += "\n" + std::string(30, ' ');
        out << left << option.help << "\n";
    }
    return out.str();
}

std::optional<std::string> CommandLine::value(const std::string& name) const {
    auto it = values_.find(name);
    if (it == values_.end()) return std::nullopt;
    return it->second;
}

bool CommandLine::getInt(const std::string& name, std::int64_t minimum, std::int64_t maximum, std::int64_t& out) {
    const auto text = value(name);
    if (!text) return true;
    char* end = nullptr;
    errno = 0;
    const long long parsed = std::strtoll(text->c_str(), &end, 10);
    if (text->empty() || *end != '\0' || errno != 0 || parsed < minimum || parsed > maximum) {
        error_ = "--" + name + " must be an integer from " + std::to_string(minimum) + " to " + std::to_string(maximum) +
                 ", got '" + *text + "'";
        return false;
    }
    out = parsed;
    return true;
}

bool CommandLine::getFloat(const std::string& name, double minimum, double maximum, double& out) {
    const auto text = value(name);
    if (!text) return true;
    char* end = nullptr;
    const double parsed = std::strtod(text->c_str(), &end);
    if (text->empty() || *end != '\0' || !std::isfinite(parsed) || parsed < minimum || parsed > maximum) {
        std::ostringstream range;
        range << minimum << " to " << maximum;
        error_ = "--" + name + " must be a number from " + range.str() + ", got '" + *text + "'";
        return false;
    }
    out = parsed;
    return true;
}

std::filesystem::path defaultModelPath() {
    namespace fs = std::filesystem;
    std::error_code error;
    if (const char* env = std::getenv("GEMMA_DESK_DEFAULT_MODEL"); env && *env) return env;
    // The installed copy first: an installed tool must not load a model from a source checkout.
    char buffer[4096];
    const ssize_t length = readlink("/proc/self/exe", buffer, sizeof buffer - 1);
    if (length > 0) {
        buffer[length] = '\0';
        const fs::path installed = fs::path(buffer).parent_path().parent_path() / "share/gemma-desk/models/default.gemma";
        if (fs::exists(installed, error)) return installed;
    }
#ifdef GEMMA_DEFAULT_MODEL_PATH
    if (fs::exists(GEMMA_DEFAULT_MODEL_PATH, error)) return GEMMA_DEFAULT_MODEL_PATH;
#endif
    return {};
}

}  // namespace gemma::cli
