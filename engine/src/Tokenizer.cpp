#include "Tokenizer.h"

#include <sentencepiece_processor.h>

#include <cstdio>

namespace gemma {

Tokenizer::Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Expected<Tokenizer> Tokenizer::fromModelBytes(std::string_view modelBytes) {
    Tokenizer tokenizer;
    tokenizer.processor_ = std::make_unique<sentencepiece::SentencePieceProcessor>();
    const auto status = tokenizer.processor_->LoadFromSerializedProto(std::string(modelBytes));
    if (!status.ok()) return Status{ErrorCode::InvalidFile, "the tokenizer model is not a valid sentencepiece model: " + status.ToString()};
    tokenizer.classifyPieces();
    auto& s = tokenizer.special_;
    s.bos = tokenizer.processor_->bos_id();
    s.eos = tokenizer.processor_->eos_id();
    s.turnStart = tokenizer.pieceId("<|turn>");
    s.turnEnd = tokenizer.pieceId("<turn|>");
    s.channelStart = tokenizer.pieceId("<|channel>");
    s.channelEnd = tokenizer.pieceId("<channel|>");
    s.toolResponseStart = tokenizer.pieceId("<|tool_response>");
    if (s.bos < 0) s.bos = tokenizer.pieceId("<bos>");
    if (s.eos < 0) s.eos = tokenizer.pieceId("<eos>");
    return tokenizer;
}

std::int32_t Tokenizer::pieceId(std::string_view piece) const {
    const int id = processor_->PieceToId(std::string(piece));
    // PieceToId answers unk for unknown pieces; only the real "<unk>" piece may map there.
    if (id == processor_->unk_id() && piece != processor_->IdToPiece(id)) return -1;
    return id;
}

std::string Tokenizer::piece(std::int32_t id) const {
    if (id < 0 || id >= vocabSize()) return {};
    return processor_->IdToPiece(id);
}

int Tokenizer::vocabSize() const { return processor_->GetPieceSize(); }

bool Tokenizer::isTemplateToken(std::int32_t id) const {
    if (id < 0 || id >= static_cast<std::int32_t>(templateTokens_.size())) return false;
    return templateTokens_[static_cast<std::size_t>(id)];
}

// Template tokens: control pieces, the Gemma 4 spellings with a bar inside the angle brackets
// ("<|turn>", "<turn|>", "<|\"|>", "<|image|>", ...) and the classic <bos>/<eos>/<pad>/<unk>/<mask>.
// Other angle-bracket pieces (HTML tags such as "<div>") are ordinary text and stay as encoded.
void Tokenizer::classifyPieces() {
    const int size = processor_->GetPieceSize();
    templateTokens_.assign(static_cast<std::size_t>(size), false);
    for (int id = 0; id < size; ++id) {
        if (processor_->IsControl(id)) {
            templateTokens_[static_cast<std::size_t>(id)] = true;
            continue;
        }
        if (processor_->IsByte(id) || processor_->IsUnknown(id)) continue;
        const std::string text = processor_->IdToPiece(id);
        if (text.size() < 3 || text.front() != '<' || text.back() != '>') continue;
        const bool barred = text[1] == '|' || text[text.size() - 2] == '|';
        const bool classic = text == "<bos>" || text == "<eos>" || text == "<pad>" || text == "<unk>" || text == "<mask>";
        templateTokens_[static_cast<std::size_t>(id)] = barred || classic;
    }
}

std::vector<std::int32_t> Tokenizer::encodeText(std::string_view text) const {
    std::vector<int> ids;
    processor_->Encode(std::string(text), &ids);
    std::vector<std::int32_t> out;
    out.reserve(ids.size());
    for (int id : ids) {
        if (!isTemplateToken(id)) {
            out.push_back(id);
            continue;
        }
        // sentencepiece matched a control-token spelling in user text: spell it out instead, one
        // character at a time, falling back to byte pieces (<0xNN>) where a character has none.
        const std::string surface = processor_->IdToPiece(id);
        std::size_t i = 0;
        while (i < surface.size()) {
            const auto lead = static_cast<unsigned char>(surface[i]);
            const std::size_t length = lead < 0x80 ? 1 : (lead >> 5) == 6 ? 2 : (lead >> 4) == 14 ? 3 : 4;
            const std::string character = surface.substr(i, length);
            const std::int32_t charId = pieceId(character);
            if (charId >= 0 && !isTemplateToken(charId)) {
                out.push_back(charId);
            } else {
                for (char byte : character) {
                    char name[8];
                    std::snprintf(name, sizeof name, "<0x%02X>", static_cast<unsigned char>(byte));
                    const std::int32_t byteId = pieceId(name);
                    out.push_back(byteId >= 0 ? byteId : processor_->unk_id());
                }
            }
            i += length;
        }
    }
    return out;
}

std::string Tokenizer::decode(std::span<const std::int32_t> ids) const {
    std::vector<int> values;
    values.reserve(ids.size());
    for (auto id : ids) {
        if (id >= 0 && id < vocabSize()) values.push_back(id);
    }
    std::string text;
    processor_->Decode(values, &text);
    return text;
}

namespace {

std::string trim(std::string_view text) {
    const auto isSpace = [](char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; };
    std::size_t begin = 0, end = text.size();
    while (begin < end && isSpace(text[begin])) ++begin;
    while (end > begin && isSpace(text[end - 1])) --end;
    return std::string(text.substr(begin, end - begin));
}

std::string stripThinking(std::string text) {
    for (;;) {
        const auto open = text.find("<|channel>");
        if (open == std::string::npos) return text;
        const auto close = text.find("<channel|>", open);
        if (close == std::string::npos) return text.substr(0, open);
        text.erase(open, close + 10 - open);
    }
}

}  // namespace

Expected<std::vector<std::int32_t>> renderChat(const Tokenizer& tokenizer, const std::vector<ChatMessage>& messages,
                                               bool emptyThoughtChannel) {
    const auto& s = tokenizer.special();
    if (s.turnStart < 0 || s.turnEnd < 0 || s.bos < 0) {
        return Status{ErrorCode::Unsupported, "the tokenizer has no <|turn>/<turn|>/<bos> tokens: not a Gemma 4 chat tokenizer"};
    }
    if (messages.empty()) return Status{ErrorCode::InvalidArgument, "a chat needs at least one message"};
    std::vector<std::int32_t> ids{s.bos};
    auto append = [&](const std::vector<std::int32_t>& more) { ids.insert(ids.end(), more.begin(), more.end()); };
    for (std::size_t i = 0; i < messages.size(); ++i) {
        const auto& message = messages[i];
        const char* role = message.role == Role::System ? "system" : message.role == Role::User ? "user" : "model";
        if (message.role == Role::System && i != 0) {
            return Status{ErrorCode::InvalidArgument, "a system message may only open the conversation"};
        }
        const std::string text = message.role == Role::Model ? trim(stripThinking(message.text)) : trim(message.text);
        ids.push_back(s.turnStart);
        // Role, newline and text in one call, as the rendered template string is tokenized.
        append(tokenizer.encodeText(std::string(role) + "\n" + text));
        ids.push_back(s.turnEnd);
        append(tokenizer.encodeText("\n"));
    }
    ids.push_back(s.turnStart);
    append(tokenizer.encodeText("model\n"));
    if (emptyThoughtChannel && s.channelStart >= 0 && s.channelEnd >= 0) {
        ids.push_back(s.channelStart);
        append(tokenizer.encodeText("thought\n"));
        ids.push_back(s.channelEnd);
    }
    return ids;
}

std::string IncrementalDecoder::push(std::int32_t id) {
    ids_.push_back(id);
    const std::string text = tokenizer_.decode(ids_);
    if (text.size() < emitted_) {
        // sentencepiece may normalise a prefix differently once more tokens arrive; never
        // retract streamed text, just resynchronise.
        emitted_ = text.size();
        return {};
    }
    // Hold back an incomplete UTF-8 tail, and a replacement character from a partial byte run.
    std::size_t end = text.size();
    std::size_t back = end;
    while (back > emitted_ && back > end - 4 && (static_cast<unsigned char>(text[back - 1]) & 0xC0) == 0x80) --back;
    if (back > emitted_ && back > 0) {
        const auto lead = static_cast<unsigned char>(text[back - 1]);
        const std::size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
        if (need > end - (back - 1)) end = back - 1;
    }
    // Byte pieces of a character not yet complete decode to U+FFFD each: hold the whole run back.
    while (end >= emitted_ + 3 && text.compare(end - 3, 3, "\xEF\xBF\xBD") == 0) end -= 3;
    if (end <= emitted_) return {};
    std::string delta = text.substr(emitted_, end - emitted_);
    emitted_ = end;
    return delta;
}

}  // namespace gemma
