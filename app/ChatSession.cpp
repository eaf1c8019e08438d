#include "ChatSession.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QRandomGenerator>
#include <spdlog/spdlog.h>

#include "ConversationStore.h"
#include "EngineController.h"

namespace desk {

namespace {

QString titleFrom(const QString& text) {
    QString title = text.simplified();
    constexpr int kMaxTitle = 48;
    if (title.size() > kMaxTitle) title = title.left(kMaxTitle - 1).trimmed() + QChar(0x2026);
    return title.isEmpty() ? QStringLiteral("New chat") : title;
}

MessageStats statsFrom(const gemma::GenerationStats& stats) {
    MessageStats result;
    result.valid = true;
    result.promptTokens = stats.promptTokens;
    result.generatedTokens = stats.generatedTokens;
    result.timeToFirstTokenMs = stats.timeToFirstTokenMs;
    result.tokensPerSecond = stats.decodeTokensPerSecond;
    result.stopReason = QString::fromLatin1(stopReasonLabel(stats.stopReason));
    return result;
}

}  // namespace

ChatSession::ChatSession(EngineController* controller, ConversationStore* store, QObject* parent, int flushIntervalMs)
    : QObject(parent), controller_(controller), store_(store) {
    qRegisterMetaType<desk::SamplingSettings>();
    qRegisterMetaType<desk::MessageStats>();
    flushTimer_.setInterval(flushIntervalMs);
    connect(&flushTimer_, &QTimer::timeout, this, &ChatSession::flushStreaming);
    connect(controller_, &EngineController::tokensArrived, this,
            [this](quint64 id, const QString& text, const QVector<gemma::StepStats>&) { onTokens(id, text); });
    connect(controller_, &EngineController::generationFinished, this, &ChatSession::onFinished);
    connect(controller_, &EngineController::generationFailed, this, &ChatSession::onFailed);
    sampling_ = defaultSampling_;
    refreshConversationList();
}

void ChatSession::refreshConversationList() {
    conversationList_.setConversations(store_->listConversations(searchFilter_));
}

void ChatSession::setSearchFilter(const QString& filter) {
    searchFilter_ = filter;
    refreshConversationList();
}

void ChatSession::stopAndSettle() {
    if (!activeGeneration_) return;
    controller_->stopGeneration();
    MessageStats stats;
    finishStreaming(stats, QString());
}

void ChatSession::newConversation() {
    stopAndSettle();
    conversationId_ = 0;
    title_ = QStringLiteral("New chat");
    sampling_ = defaultSampling_;
    systemPrompt_.clear();
    chatModel_.clear();
    emit currentConversationChanged(0, title_);
    emit settingsLoaded(systemPrompt_, sampling_);
}

bool ChatSession::openConversation(qint64 conversationId) {
    if (conversationId == conversationId_ && conversationId != 0) return true;
    const auto record = store_->conversation(conversationId);
    if (!record) return false;
    stopAndSettle();
    conversationId_ = record->id;
    title_ = record->title;
    systemPrompt_ = record->systemPrompt;
    sampling_ = record->sampling;
    QVector<MessageRecord> messages = store_->messages(conversationId);
    for (MessageRecord& message : messages) {
        // A reply still marked streaming was cut off when the app died; show what was saved.
        if (message.streaming) {
            message.streaming = false;
            if (message.error.isEmpty())
                message.error = QStringLiteral("Interrupted: the app closed before this reply finished.");
        }
    }
    chatModel_.setMessages(messages);
    emit currentConversationChanged(conversationId_, title_);
    emit settingsLoaded(systemPrompt_, sampling_);
    return true;
}

bool ChatSession::renameConversation(qint64 conversationId, const QString& title) {
    const QString trimmed = title.simplified();
    if (trimmed.isEmpty() || !store_->renameConversation(conversationId, trimmed)) return false;
    if (conversationId == conversationId_) {
        title_ = trimmed;
        emit currentConversationChanged(conversationId_, title_);
    }
    refreshConversationList();
    return true;
}

bool ChatSession::deleteConversation(qint64 conversationId) {
    if (conversationId == conversationId_) stopAndSettle();
    if (!store_->deleteConversation(conversationId)) return false;
    if (conversationId == conversationId_) newConversation();
    refreshConversationList();
    return true;
}

void ChatSession::setSystemPrompt(const QString& systemPrompt) {
    systemPrompt_ = systemPrompt;
    if (conversationId_) store_->setSystemPrompt(conversationId_, systemPrompt);
}

void ChatSession::setSampling(const SamplingSettings& sampling) {
    sampling_ = sampling;
    if (conversationId_) store_->setSampling(conversationId_, sampling);
}

bool ChatSession::ensureConversation(const QString& firstUserText) {
    if (conversationId_) return true;
    title_ = titleFrom(firstUserText);
    conversationId_ = store_->createConversation(title_, systemPrompt_, sampling_);
    if (!conversationId_) {
        emit errorOccurred(QStringLiteral("Could not save the conversation: %1").arg(store_->lastError()));
        return false;
    }
    emit currentConversationChanged(conversationId_, title_);
    return true;
}

GenerationJob ChatSession::buildJob() const {
    GenerationJob job;
    if (!systemPrompt_.trimmed().isEmpty())
        job.messages.push_back({gemma::Role::System, systemPrompt_.toStdString()});
    for (const MessageRecord& message : chatModel_.messages()) {
        if (message.text.isEmpty()) continue;  // a failed or still-empty reply adds nothing
        const gemma::Role role = message.role == MessageRole::Model    ? gemma::Role::Model
                                 : message.role == MessageRole::System ? gemma::Role::System
                                                                       : gemma::Role::User;
        job.messages.push_back({role, message.text.toStdString()});
    }
    job.sampling.temperature = static_cast<float>(sampling_.temperature);
    job.sampling.greedy = sampling_.temperature <= 0.0;
    job.sampling.topK = sampling_.topK;
    job.sampling.topP = static_cast<float>(sampling_.topP);
    job.sampling.minP = static_cast<float>(sampling_.minP);
    job.sampling.repeatPenalty = static_cast<float>(sampling_.repeatPenalty);
    job.sampling.seed = sampling_.seed ? sampling_.seed : QRandomGenerator::global()->generate64();
    job.maxNewTokens = sampling_.maxTokens;
    return job;
}

bool ChatSession::send(const QString& text) {
    const QString trimmed = text.trimmed();
    if (trimmed.isEmpty() || activeGeneration_) return false;
    if (!controller_->isModelLoaded()) {
        emit errorOccurred(QStringLiteral("Load a model first (File \u2192 Open model)."));
        return false;
    }
    if (controller_->isGenerating() || controller_->isBusy()) {
        emit errorOccurred(QStringLiteral("The engine is busy; try again in a moment."));
        return false;
    }
    if (!ensureConversation(trimmed)) return false;
    MessageRecord user;
    user.role = MessageRole::User;
    user.text = trimmed;
    user.createdAt = QDateTime::currentDateTime();
    user.id = store_->appendMessage(conversationId_, user);
    chatModel_.appendMessage(user);
    return startGeneration();
}

bool ChatSession::startGeneration() {
    const GenerationJob job = buildJob();
    MessageRecord reply;
    reply.role = MessageRole::Model;
    reply.streaming = true;
    reply.createdAt = QDateTime::currentDateTime();
    reply.id = store_->appendMessage(conversationId_, reply);
    streamingRow_ = chatModel_.appendMessage(reply);
    activeGeneration_ = controller_->generate(job);
    if (!activeGeneration_) {
        activeGeneration_ = 1;  // so finishStreaming settles the row
        finishStreaming({}, QStringLiteral("The engine could not start generating."));
        return false;
    }
    streamingDirty_ = false;
    flushTimer_.start();
    refreshConversationList();
    emit generatingChanged(true);
    return true;
}

void ChatSession::onTokens(quint64 generationId, const QString& text) {
    if (generationId != activeGeneration_ || streamingRow_ < 0) return;
    chatModel_.appendText(streamingRow_, text);
    streamingDirty_ = true;
}

void ChatSession::flushStreaming() {
    if (!streamingDirty_ || streamingRow_ < 0) return;
    const MessageRecord& message = chatModel_.message(streamingRow_);
    if (!store_->flushStreamingText(message.id, message.text))
        spdlog::warn("Could not flush the streaming reply: {}", store_->lastError().toStdString());
    streamingDirty_ = false;
}

void ChatSession::finishStreaming(const MessageStats& stats, const QString& error) {
    if (!activeGeneration_) return;
    flushTimer_.stop();
    activeGeneration_ = 0;
    if (streamingRow_ >= 0 && streamingRow_ < chatModel_.count()) {
        chatModel_.setStreaming(streamingRow_, false);
        if (stats.valid) chatModel_.setStats(streamingRow_, stats);
        if (!error.isEmpty()) chatModel_.setError(streamingRow_, error);
        if (!store_->updateMessage(chatModel_.message(streamingRow_)))
            spdlog::warn("Could not save the reply: {}", store_->lastError().toStdString());
    }
    streamingRow_ = -1;
    refreshConversationList();
    emit generatingChanged(false);
    if (stats.valid) emit replyFinished(stats);
}

void ChatSession::onFinished(quint64 generationId, const gemma::GenerationStats& stats) {
    if (generationId != activeGeneration_) return;
    finishStreaming(statsFrom(stats), QString());
}

void ChatSession::onFailed(quint64 generationId, const QString& message) {
    if (generationId != activeGeneration_) return;
    finishStreaming({}, QStringLiteral("Generation failed: %1").arg(message));
    emit errorOccurred(QStringLiteral("Generation failed: %1").arg(message));
}

void ChatSession::stop() { controller_->stopGeneration(); }

void ChatSession::finishNow() { stopAndSettle(); }

bool ChatSession::regenerate() {
    if (activeGeneration_ || chatModel_.count() == 0 || !controller_->isModelLoaded()) return false;
    if (controller_->isGenerating() || controller_->isBusy()) return false;
    int lastRow = chatModel_.count() - 1;
    if (chatModel_.message(lastRow).role == MessageRole::Model) {
        store_->deleteMessagesFrom(conversationId_, chatModel_.message(lastRow).id);
        chatModel_.removeFrom(lastRow);
        --lastRow;
    }
    if (lastRow < 0 || chatModel_.message(lastRow).role != MessageRole::User) return false;
    return startGeneration();
}

bool ChatSession::editAndResend(int row, const QString& text) {
    if (activeGeneration_ || row < 0 || row >= chatModel_.count()) return false;
    if (chatModel_.message(row).role != MessageRole::User || text.trimmed().isEmpty()) return false;
    if (!controller_->isModelLoaded() || controller_->isGenerating() || controller_->isBusy()) return false;
    store_->deleteMessagesFrom(conversationId_, chatModel_.message(row).id);
    chatModel_.removeFrom(row);
    MessageRecord user;
    user.role = MessageRole::User;
    user.text = text.trimmed();
    user.createdAt = QDateTime::currentDateTime();
    user.id = store_->appendMessage(conversationId_, user);
    chatModel_.appendMessage(user);
    return startGeneration();
}

QString ChatSession::exportMarkdown() const {
    QString out = QStringLiteral("# %1\n\n").arg(title_.isEmpty() ? QStringLiteral("Conversation") : title_);
    if (!systemPrompt_.trimmed().isEmpty()) out += QStringLiteral("> **System:** %1\n\n").arg(systemPrompt_.trimmed());
    for (const MessageRecord& message : chatModel_.messages()) {
        out += message.role == MessageRole::User ? QStringLiteral("## You\n\n") : QStringLiteral("## Gemma\n\n");
        out += message.text.trimmed() + QStringLiteral("\n\n");
        if (message.stats.valid) out += QStringLiteral("*%1*\n\n").arg(formatStats(message.stats));
    }
    return out;
}

QByteArray ChatSession::exportJson() const {
    QJsonArray messages;
    for (const MessageRecord& message : chatModel_.messages()) {
        QJsonObject object{{"role", roleToString(message.role)},
                           {"text", message.text},
                           {"createdAt", message.createdAt.toString(Qt::ISODateWithMs)}};
        if (message.stats.valid) {
            object["stats"] = QJsonObject{{"promptTokens", message.stats.promptTokens},
                                          {"generatedTokens", message.stats.generatedTokens},
                                          {"timeToFirstTokenMs", message.stats.timeToFirstTokenMs},
                                          {"tokensPerSecond", message.stats.tokensPerSecond},
                                          {"stopReason", message.stats.stopReason}};
        }
        if (!message.error.isEmpty()) object["error"] = message.error;
        messages.append(object);
    }
    QJsonObject root{{"title", title_},
                     {"systemPrompt", systemPrompt_},
                     {"sampling", QJsonDocument::fromJson(samplingToJson(sampling_).toUtf8()).object()},
                     {"messages", messages}};
    return QJsonDocument(root).toJson(QJsonDocument::Indented);
}

}  // namespace desk
