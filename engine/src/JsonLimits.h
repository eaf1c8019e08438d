// A guard in front of nlohmann::json::parse for text from files: its parser recurses once per
// nesting level, so a hostile header of a million '[' would overflow the stack. Checking the
// depth first (strings skipped, escapes honoured) turns that into an ordinary error.
#pragma once

#include <cstddef>
#include <string_view>

namespace gemma {

inline constexpr int kMaxJsonDepth = 64;  // every format we read nests at most 4 deep

inline bool jsonDepthWithin(std::string_view text, int maxDepth = kMaxJsonDepth) {
    int depth = 0;
    bool inString = false;
    for (std::size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (inString) {
            if (c == '\\') ++i;
            else if (c == '"') inString = false;
            continue;
        }
        if (c == '"') inString = true;
        else if (c == '[' || c == '{') {
            if (++depth > maxDepth) return false;
        } else if (c == ']' || c == '}') {
            --depth;
        }
    }
    return true;
}

}  // namespace gemma
