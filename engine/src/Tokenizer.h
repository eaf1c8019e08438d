// sentencepiece over the package's tokenizer.model, plus the Gemma 4 turn format (GEMMA4.md §7)
// assembled from token ids. Text a user types is always encoded as plain text: a control-token
// spelling such as "<|turn>" in user text becomes ordinary text tokens, never the control id.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gemma/Engine.h"
#include "gemma/Status.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace gemma {

struct SpecialTokens {
    std::int32_t bos = -1, eos = -1;
    std::int32_t turnStart = -1, turnEnd = -1;        // <|turn>, <turn|>
    std::int32_t channelStart = -1, channelEnd = -1;  // <|channel>, <channel|>
    std::int32_t toolResponseStart = -1;              // <|tool_response>
};

class Tokenizer {
public:
    Tokenizer();
    Tokenizer(Tokenizer&&) noexcept;
    Tokenizer& operator=(Tokenizer&&) noexcept;
    ~Tokenizer();

    static Expected<Tokenizer> fromModelBytes(std::string_view modelBytes);

    // Plain text → ids. Never yields a control or template token (see the header comment).
    std::vector<std::int32_t> encodeText(std::string_view text) const;
    std::string decode(std::span<const std::int32_t> ids) const;
    std::int32_t pieceId(std::string_view piece) const;  // -1 when the vocabulary lacks it
    std::string piece(std::int32_t id) const;
    int vocabSize() const;
    const SpecialTokens& special() const { return special_; }
    // True for ids that only the template may emit (see classifyPieces in Tokenizer.cpp).
    bool isTemplateToken(std::int32_t id) const;

private:
    void classifyPieces();

    std::unique_ptr<sentencepiece::SentencePieceProcessor> processor_;
    SpecialTokens special_;
    std::vector<bool> templateTokens_;
};

// The Gemma 4 chat prompt: <bos>, an optional system turn, one turn per message
// (<|turn>ROLE\nTEXT<turn|>\n, assistant → "model"), then the generation prompt
// <|turn>model\n and, when `emptyThoughtChannel`, <|channel>thought\n<channel|>.
// Thinking spans <|channel>…<channel|> are stripped from earlier model turns; user text is trimmed.
Expected<std::vector<std::int32_t>> renderChat(const Tokenizer& tokenizer, const std::vector<ChatMessage>& messages,
                                               bool emptyThoughtChannel);

// Streams text out of a growing list of ids: each push returns the newly completed text, holding
// back a trailing incomplete UTF-8 sequence until the next token completes it.
class IncrementalDecoder {
public:
    explicit IncrementalDecoder(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}
    std::string push(std::int32_t id);

private:
    const Tokenizer& tokenizer_;
    std::vector<std::int32_t> ids_;
    std::size_t emitted_ = 0;
};

}  // namespace gemma
