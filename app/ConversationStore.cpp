#include "ConversationStore.h"

#include <QAtomicInteger>
#include <QJsonDocument>
#include <QJsonObject>
#include <QSqlDatabase>
#include <QSqlError>
#include <QSqlQuery>
#include <QVariant>

namespace desk {

namespace {

QAtomicInteger<int> connectionCounter;

qint64 nowMs() { return QDateTime::currentMSecsSinceEpoch(); }

QString statsToJson(const MessageStats& stats) {
    if (!stats.valid) return {};
    QJsonObject object{{"promptTokens", stats.promptTokens},
                       {"generatedTokens", stats.generatedTokens},
                       {"timeToFirstTokenMs", stats.timeToFirstTokenMs},
                       {"tokensPerSecond", stats.tokensPerSecond},
                       {"stopReason", stats.stopReason}};
    return QString::fromUtf8(QJsonDocument(object).toJson(QJsonDocument::Compact));
}

MessageStats statsFromJson(const QString& json) {
    MessageStats stats;
    if (json.isEmpty()) return stats;
    const QJsonObject object = QJsonDocument::fromJson(json.toUtf8()).object();
    if (object.isEmpty()) return stats;
    stats.valid = true;
    stats.promptTokens = object.value("promptTokens").toInt();
    stats.generatedTokens = object.value("generatedTokens").toInt();
    stats.timeToFirstTokenMs = object.value("timeToFirstTokenMs").toDouble();
    stats.tokensPerSecond = object.value("tokensPerSecond").toDouble();
    stats.stopReason = object.value("stopReason").toString();
    return stats;
}

}  // namespace

QString samplingToJson(const SamplingSettings& sampling) {
    QJsonObject object{{"temperature", sampling.temperature}, {"topK", sampling.topK},
                       {"topP", sampling.topP},               {"minP", sampling.minP},
                       {"repeatPenalty", sampling.repeatPenalty}, {"maxTokens", sampling.maxTokens},
                       {"seed", QString::number(sampling.seed)}};
    return QString::fromUtf8(QJsonDocument(object).toJson(QJsonDocument::Compact));
}

SamplingSettings samplingFromJson(const QString& json) {
    SamplingSettings sampling;
    const QJsonObject object = QJsonDocument::fromJson(json.toUtf8()).object();
    sampling.temperature = object.value("temperature").toDouble(sampling.temperature);
    sampling.topK = object.value("topK").toInt(sampling.topK);
    sampling.topP = object.value("topP").toDouble(sampling.topP);
    sampling.minP = object.value("minP").toDouble(sampling.minP);
    sampling.repeatPenalty = object.value("repeatPenalty").toDouble(sampling.repeatPenalty);
    sampling.maxTokens = object.value("maxTokens").toInt(sampling.maxTokens);
    sampling.seed = object.value("seed").toString().toULongLong();
    return sampling;
}

ConversationStore::ConversationStore()
    : connectionName_(QStringLiteral("gemma-desk-store-%1").arg(connectionCounter.fetchAndAddRelaxed(1))) {}

ConversationStore::~ConversationStore() {
    {
        QSqlDatabase database = QSqlDatabase::database(connectionName_, false);
        if (database.isOpen()) database.close();
    }
    if (QSqlDatabase::contains(connectionName_)) QSqlDatabase::removeDatabase(connectionName_);
}

bool ConversationStore::isOpen() const { return QSqlDatabase::database(connectionName_, false).isOpen(); }

bool ConversationStore::exec(const QString& sql) {
    QSqlQuery query(QSqlDatabase::database(connectionName_, false));
    if (!query.exec(sql)) {
        lastError_ = query.lastError().text();
        return false;
    }
    return true;
}

bool ConversationStore::open(const QString& databasePath, QString* error) {
    QSqlDatabase database = QSqlDatabase::contains(connectionName_)
                                ? QSqlDatabase::database(connectionName_, false)
                                : QSqlDatabase::addDatabase(QStringLiteral("QSQLITE"), connectionName_);
    database.setDatabaseName(databasePath);
    database.setConnectOptions(QStringLiteral("QSQLITE_BUSY_TIMEOUT=3000"));
    path_ = databasePath;
    auto fail = [&](const QString& why) {
        lastError_ = why;
        if (error) *error = QStringLiteral("Could not open the conversation database %1: %2").arg(databasePath, why);
        return false;
    };
    if (!database.open()) return fail(database.lastError().text());
    // WAL: a killed process never corrupts the file and readers never block the writer.
    // synchronous=NORMAL keeps every committed transaction across a process crash (only an OS
    // crash could drop the last few), at a fraction of FULL's fsync cost per streaming flush.
    const char* pragmas[] = {"PRAGMA journal_mode=WAL", "PRAGMA synchronous=NORMAL", "PRAGMA foreign_keys=ON"};
    for (const char* pragma : pragmas)
        if (!exec(QString::fromLatin1(pragma))) return fail(lastError_);
    const char* schema[] = {
        "CREATE TABLE IF NOT EXISTS conversations ("
        " id INTEGER PRIMARY KEY AUTOINCREMENT, title TEXT NOT NULL, system_prompt TEXT NOT NULL DEFAULT '',"
        " sampling TEXT NOT NULL DEFAULT '', created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL)",
        "CREATE TABLE IF NOT EXISTS messages ("
        " id INTEGER PRIMARY KEY AUTOINCREMENT,"
        " conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,"
        " role TEXT NOT NULL, text TEXT NOT NULL, streaming INTEGER NOT NULL DEFAULT 0,"
        " error TEXT NOT NULL DEFAULT '', stats TEXT NOT NULL DEFAULT '', created_at INTEGER NOT NULL)",
        "CREATE INDEX IF NOT EXISTS messages_by_conversation ON messages(conversation_id, id)",
    };
    for (const char* statement : schema)
        if (!exec(QString::fromLatin1(statement))) return fail(lastError_);
    return true;
}

qint64 ConversationStore::createConversation(const QString& title, const QString& systemPrompt,
                                             const SamplingSettings& sampling) {
    QSqlQuery query(QSqlDatabase::database(connectionName_, false));
    query.prepare(QStringLiteral("INSERT INTO conversations (title, system_prompt, sampling, created_at, updated_at)"
                                 " VALUES (COALESCE(?, ''), COALESCE(?, ''), ?, ?, ?)"));
    const qint64 now = nowMs();
    query.addBindValue(title);
    query.addBindValue(systemPrompt);
    query.addBindValue(samplingToJson(sampling));
    query.addBindValue(now);
    query.addBindValue(now);
    if (!query.exec()) {
        lastError_ = query.lastError().text();
        return 0;
    }
    return query.lastInsertId().toLongLong();
}

bool ConversationStore::touch(qint64 conversationId) {
    QSqlQuery query(QSqlDatabase::database(connectionName_, false));
    query.prepare(QStringLiteral("UPDATE conversations SET updated_at = ? WHERE id = ?"));
    query.addBindValue(nowMs());
    query.addBindValue(conversationId);
    return query.exec();
}

bool ConversationStore::renameConversation(qint64 id, const QString& title) {
    QSqlQuery query(QSqlDatabase::database(connectionName_, false));
    query.prepare(QStringLiteral("UPDATE conversations SET title = COALESCE(?, '') WHERE id = ?"));
    query.addBindValue(title);
    query.addBindValue(id);
    if (!query.exec()) lastError_ = query.lastError().text();
    return query.numRowsAffected() == 1;
}

bool ConversationStore::deleteConversation(qint64 id) {
    QSqlQuery query(QSqlDatabase::database(connectionName_, false));
    query.prepare(QStringLiteral("DELETE FROM conversations WHERE id = ?"));
    query.addBindValue(id);
    if (!query.exec()) lastError_ = query.lastError().text();
    return query.numRowsAffected() == 1;
}

bool ConversationStore::setSystemPrompt(qint64 id, const QString& systemPrompt) {
    QSqlQuery query(QSqlDatabase::database(connectionName_, false));
    query.prepare(QStringLiteral("UPDATE conversations SET system_prompt = COALESCE(?, '') WHERE id = ?"));
    query.addBindValue(systemPrompt);
    query.addBindValue(id);
    return query.exec();
}

bool ConversationStore::setSampling(qint64 id, const SamplingSettings& sampling) {
    QSqlQuery query(QSqlDatabase::database(connectionName_, false));
    query.prepare(QStringLiteral("UPDATE conversations SET sampling = ? WHERE id = ?"));
    query.addBindValue(samplingToJson(sampling));
    query.addBindValue(id);
    return query.exec();
}

namespace {
ConversationRecord readConversation(const QSqlQuery& query) {
    ConversationRecord record;
    record.id = query.value(0).toLongLong();
    record.title = query.value(1).toString();
    record.systemPrompt = query.value(2).toString();
    record.sampling = samplingFromJson(query.value(3).toString());
    record.createdAt = QDateTime::fromMSecsSinceEpoch(query.value(4).toLongLong());
    record.updatedAt = QDateTime::fromMSecsSinceEpoch(query.value(5).toLongLong());
    return record;
}
}  // namespace

std::optional<ConversationRecord> ConversationStore::conversation(qint64 id) const {
    QSqlQuery query(QSqlDatabase::database(connectionName_, false));
    query.prepare(QStringLiteral("SELECT id, title, system_prompt, sampling, created_at, updated_at"
                                 " FROM conversations WHERE id = ?"));
    query.addBindValue(id);
    if (!query.exec() || !query.next()) return std::nullopt;
    return readConversation(query);
}

QVector<ConversationRecord> ConversationStore::listConversations(const QString& filter) const {
    QSqlQuery query(QSqlDatabase::database(connectionName_, false));
    const QString columns = QStringLiteral("SELECT id, title, system_prompt, sampling, created_at, updated_at FROM conversations");
    if (filter.trimmed().isEmpty()) {
        query.prepare(columns + QStringLiteral(" ORDER BY updated_at DESC, id DESC"));
    } else {
        // LIKE with an escape character so a user's "%" or "_" matches literally.
        QString pattern = filter.trimmed();
        pattern.replace(QLatin1Char('\\'), QStringLiteral("\\\\"))
            .replace(QLatin1Char('%'), QStringLiteral("\\%"))
            .replace(QLatin1Char('_'), QStringLiteral("\\_"));
        pattern = QLatin1Char('%') + pattern + QLatin1Char('%');
        query.prepare(columns +
                      QStringLiteral(" WHERE title LIKE ? ESCAPE '\\' OR id IN (SELECT conversation_id FROM messages"
                                     " WHERE text LIKE ? ESCAPE '\\') ORDER BY updated_at DESC, id DESC"));
        query.addBindValue(pattern);
        query.addBindValue(pattern);
    }
    QVector<ConversationRecord> result;
    if (!query.exec()) {
        lastError_ = query.lastError().text();
        return result;
    }
    while (query.next()) result.push_back(readConversation(query));
    return result;
}

QVector<MessageRecord> ConversationStore::messages(qint64 conversationId) const {
    QSqlQuery query(QSqlDatabase::database(connectionName_, false));
    query.prepare(QStringLiteral("SELECT id, role, text, streaming, error, stats, created_at FROM messages"
                                 " WHERE conversation_id = ? ORDER BY id"));
    query.addBindValue(conversationId);
    QVector<MessageRecord> result;
    if (!query.exec()) {
        lastError_ = query.lastError().text();
        return result;
    }
    while (query.next()) {
        MessageRecord record;
        record.id = query.value(0).toLongLong();
        record.role = roleFromString(query.value(1).toString());
        record.text = query.value(2).toString();
        record.streaming = query.value(3).toBool();
        record.error = query.value(4).toString();
        record.stats = statsFromJson(query.value(5).toString());
        record.createdAt = QDateTime::fromMSecsSinceEpoch(query.value(6).toLongLong());
        result.push_back(record);
    }
    return result;
}

qint64 ConversationStore::appendMessage(qint64 conversationId, const MessageRecord& message) {
    QSqlDatabase database = QSqlDatabase::database(connectionName_, false);
    database.transaction();
    QSqlQuery query(database);
    query.prepare(QStringLiteral("INSERT INTO messages (conversation_id, role, text, streaming, error, stats, created_at)"
                                 " VALUES (?, ?, COALESCE(?, ''), ?, COALESCE(?, ''), COALESCE(?, ''), ?)"));
    query.addBindValue(conversationId);
    query.addBindValue(roleToString(message.role));
    query.addBindValue(message.text);
    query.addBindValue(message.streaming ? 1 : 0);
    query.addBindValue(message.error);
    query.addBindValue(statsToJson(message.stats));
    query.addBindValue(message.createdAt.isValid() ? message.createdAt.toMSecsSinceEpoch() : nowMs());
    if (!query.exec()) {
        lastError_ = query.lastError().text();
        database.rollback();
        return 0;
    }
    const qint64 id = query.lastInsertId().toLongLong();
    touch(conversationId);
    database.commit();
    return id;
}

bool ConversationStore::updateMessage(const MessageRecord& message) {
    QSqlDatabase database = QSqlDatabase::database(connectionName_, false);
    database.transaction();
    QSqlQuery query(database);
    query.prepare(QStringLiteral("UPDATE messages SET text = COALESCE(?, ''), streaming = ?, error = COALESCE(?, ''),"
                                 " stats = COALESCE(?, '') WHERE id = ?"));
    query.addBindValue(message.text);
    query.addBindValue(message.streaming ? 1 : 0);
    query.addBindValue(message.error);
    query.addBindValue(statsToJson(message.stats));
    query.addBindValue(message.id);
    if (!query.exec()) {
        lastError_ = query.lastError().text();
        database.rollback();
        return false;
    }
    return database.commit();
}

bool ConversationStore::flushStreamingText(qint64 messageId, const QString& text) {
    QSqlDatabase database = QSqlDatabase::database(connectionName_, false);
    database.transaction();
    QSqlQuery query(database);
    query.prepare(QStringLiteral("UPDATE messages SET text = COALESCE(?, '') WHERE id = ?"));
    query.addBindValue(text);
    query.addBindValue(messageId);
    if (!query.exec()) {
        lastError_ = query.lastError().text();
        database.rollback();
        return false;
    }
    return database.commit();
}

bool ConversationStore::deleteMessagesFrom(qint64 conversationId, qint64 messageId) {
    QSqlQuery query(QSqlDatabase::database(connectionName_, false));
    query.prepare(QStringLiteral("DELETE FROM messages WHERE conversation_id = ? AND id >= ?"));
    query.addBindValue(conversationId);
    query.addBindValue(messageId);
    if (!query.exec()) {
        lastError_ = query.lastError().text();
        return false;
    }
    return true;
}

QString ConversationStore::integrityCheck() const {
    QSqlQuery query(QSqlDatabase::database(connectionName_, false));
    if (!query.exec(QStringLiteral("PRAGMA integrity_check")) || !query.next()) return query.lastError().text();
    return query.value(0).toString();
}

}  // namespace desk
