#include "Logging.h"

#include <QDir>
#include <spdlog/sinks/rotating_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace desk {

namespace {

QString currentLogPath;

void qtMessageToSpdlog(QtMsgType type, const QMessageLogContext&, const QString& message) {
    const std::string text = message.toStdString();
    switch (type) {
    case QtDebugMsg: spdlog::debug("[qt] {}", text); break;
    case QtInfoMsg: spdlog::info("[qt] {}", text); break;
    case QtWarningMsg: spdlog::warn("[qt] {}", text); break;
    case QtCriticalMsg:
    case QtFatalMsg: spdlog::error("[qt] {}", text); break;
    }
}

}  // namespace

QString initLogging(const QString& logDir, bool alsoToStderr) {
    QDir().mkpath(logDir);
    currentLogPath = QDir(logDir).filePath(QStringLiteral("gemma-desk.log"));
    std::vector<spdlog::sink_ptr> sinks;
    try {
        // 5 MB per file, 3 files: enough history for a bug report, bounded on disk.
        sinks.push_back(std::make_shared<spdlog::sinks::rotating_file_sink_mt>(currentLogPath.toStdString(),
                                                                               5 * 1024 * 1024, 3));
    } catch (const spdlog::spdlog_ex& error) {
        fprintf(stderr, "gemma-desk: cannot write the log file %s: %s\n", qPrintable(currentLogPath), error.what());
        currentLogPath.clear();
    }
    if (alsoToStderr) sinks.push_back(std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
    auto logger = std::make_shared<spdlog::logger>("gemma-desk", sinks.begin(), sinks.end());
    logger->set_pattern("%Y-%m-%d %H:%M:%S.%e [%l] [%t] %v");
    logger->set_level(spdlog::level::info);
    logger->flush_on(spdlog::level::warn);
    spdlog::set_default_logger(logger);
    spdlog::flush_every(std::chrono::seconds(2));
    qInstallMessageHandler(qtMessageToSpdlog);
    return currentLogPath;
}

QString logFilePath() { return currentLogPath; }

}  // namespace desk
