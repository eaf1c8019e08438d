// A small command-line parser shared by the headless tools (which must build without Qt or any
// dependency the GPU machine lacks). Options are "--name value" or "--name=value"; flags take
// no value. Errors come back as text for the tool to print; nothing here exits.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace gemma::cli {

struct OptionSpec {
    std::string name;  // without the leading "--"
    bool takesValue = true;
    std::string help;
    std::string valueName = "VALUE";
};

class CommandLine {
public:
    CommandLine(std::string program, std::string synopsis, std::vector<OptionSpec> options);

    // Parses argv; on failure returns false and sets error(). Positional arguments are kept.
    bool parse(int argc, char** argv);
    // parse() plus the options every tool shares: prints the error (stderr, exit code 1), --help
    // or --version (stdout, exit code 0) and returns the exit code; nullopt means "carry on".
    std::optional<int> parseStandard(int argc, char** argv);
    const std::string& error() const { return error_; }
    std::string helpText() const;

    bool has(const std::string& name) const { return values_.count(name) > 0; }
    std::optional<std::string> value(const std::string& name) const;
    const std::vector<std::string>& positional() const { return positional_; }

    // Typed getters: on a malformed value they set error() and return false.
    bool getInt(const std::string& name, std::int64_t minimum, std::int64_t maximum, std::int64_t& out);
    bool getFloat(const std::string& name, double minimum, double maximum, double& out);

private:
    std::string program_, synopsis_;
    std::vector<OptionSpec> options_;
    std::map<std::string, std::string> values_;
    std::vector<std::string> positional_;
    std::string error_;
};

// Where the embedded default model is: $GEMMA_DESK_DEFAULT_MODEL, then the installed
// <exe>/../share/gemma-desk/models/default.gemma, then the build tree's copy. Empty when none exists.
std::filesystem::path defaultModelPath();

}  // namespace gemma::cli
