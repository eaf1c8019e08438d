// The chat use cases over the engine controller and the store: send, stop, regenerate,
// edit-and-resend, conversation management and export. It owns the Qt models the views bind to.
// The streaming reply is kept in the ChatModel and flushed to SQLite every `flushIntervalMs` in
// one transaction, so a crash loses at most that much of a reply and nothing else.
#pragma once

#include <QObject>
#include <QTimer>

#include "ChatModel.h"
#include "ChatTypes.h"
#include "ConversationListModel.h"
#include "EngineTypes.h"

namespace desk {

class EngineController;
class ConversationStore;

class ChatSession : public QObject {
    Q_OBJECT
public:
    static constexpr int kDefaultFlushIntervalMs = 250;

    ChatSession(EngineController* controller, ConversationStore* store, QObject* parent = nullptr,
                int flushIntervalMs = kDefaultFlushIntervalMs);

    ChatModel* chatModel() { return &chatModel_; }
    ConversationListModel* conversationList() { return &conversationList_; }

    qint64 currentConversationId() const { return conversationId_; }
    QString currentTitle() const { return title_; }
    bool isGenerating() const { return activeGeneration_ != 0; }
    QString systemPrompt() const { return systemPrompt_; }
    SamplingSettings sampling() const { return sampling_; }
    // Settings for conversations created from now on (from the app's settings).
    void setDefaultSampling(const SamplingSettings& sampling) { defaultSampling_ = sampling; }

    // The request the engine would get for the current conversation (tests and export use it).
    GenerationJob buildJob() const;

public slots:
    void newConversation();
    bool openConversation(qint64 conversationId);
    bool renameConversation(qint64 conversationId, const QString& title);
    bool deleteConversation(qint64 conversationId);
    void setSearchFilter(const QString& filter);
    void refreshConversationList();
    void setSystemPrompt(const QString& systemPrompt);
    void setSampling(const desk::SamplingSettings& sampling);

    bool send(const QString& text);
    void stop();
    // Stops and settles the streaming reply now, keeping the text received so far (used when
    // quitting: the worker's final signal would arrive after the event loop has ended).
    void finishNow();
    bool regenerate();
    bool editAndResend(int row, const QString& text);

public:
    QString exportMarkdown() const;
    QByteArray exportJson() const;

signals:
    void generatingChanged(bool generating);
    void currentConversationChanged(qint64 conversationId, const QString& title);
    void settingsLoaded(const QString& systemPrompt, const desk::SamplingSettings& sampling);
    void errorOccurred(const QString& message);
    void replyFinished(const desk::MessageStats& stats);

private:
    bool ensureConversation(const QString& firstUserText);
    bool startGeneration();
    void finishStreaming(const MessageStats& stats, const QString& error);
    void flushStreaming();
    void onTokens(quint64 generationId, const QString& text);
    void onFinished(quint64 generationId, const gemma::GenerationStats& stats);
    void onFailed(quint64 generationId, const QString& message);
    void stopAndSettle();

    EngineController* controller_;
    ConversationStore* store_;
    ChatModel chatModel_;
    ConversationListModel conversationList_;
    QTimer flushTimer_;
    QString searchFilter_;

    qint64 conversationId_ = 0;  // 0: an unsaved new chat (stored on its first message)
    QString title_;
    QString systemPrompt_;
    SamplingSettings sampling_;
    SamplingSettings defaultSampling_;

    quint64 activeGeneration_ = 0;
    int streamingRow_ = -1;
    bool streamingDirty_ = false;
};

}  // namespace desk

Q_DECLARE_METATYPE(desk::SamplingSettings)
Q_DECLARE_METATYPE(desk::MessageStats)
