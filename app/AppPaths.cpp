#include "AppPaths.h"

#include <QCoreApplication>
#include <QCryptographicHash>
#include <QDir>
#include <QFileInfo>
#include <QStandardPaths>

#ifndef GEMMA_DEFAULT_MODEL_PATH
#define GEMMA_DEFAULT_MODEL_PATH ""
#endif

namespace desk {

QString AppPaths::databasePath() const { return QDir(dataDir).filePath(QStringLiteral("conversations.sqlite")); }
QString AppPaths::logDir() const { return QDir(dataDir).filePath(QStringLiteral("logs")); }
QString AppPaths::modelsDir() const { return QDir(dataDir).filePath(QStringLiteral("models")); }
QString AppPaths::settingsPath() const { return QDir(dataDir).filePath(QStringLiteral("settings.ini")); }

AppPaths AppPaths::standard() {
    AppPaths paths;
    const QString overridden = qEnvironmentVariable("GEMMA_DESK_DATA_DIR");
    paths.dataDir = !overridden.isEmpty() ? overridden
                                          : QStandardPaths::writableLocation(QStandardPaths::AppDataLocation);
    if (paths.dataDir.isEmpty()) paths.dataDir = QDir::home().filePath(QStringLiteral(".gemma-desk"));
    return paths;
}

bool AppPaths::ensureDirectories(QString* error) const {
    for (const QString& dir : {dataDir, logDir(), modelsDir()}) {
        if (!QDir().mkpath(dir)) {
            if (error) *error = QStringLiteral("Could not create the folder %1.").arg(dir);
            return false;
        }
    }
    return true;
}

DefaultModelSources defaultModelSources() {
    DefaultModelSources sources;
    sources.environment = qEnvironmentVariable("GEMMA_DESK_DEFAULT_MODEL");
    sources.compiledIn = QString::fromUtf8(GEMMA_DEFAULT_MODEL_PATH);
    sources.applicationDir = QCoreApplication::instance() ? QCoreApplication::applicationDirPath() : QString();
    return sources;
}

std::optional<QString> findDefaultModel(const DefaultModelSources& sources) {
    QStringList candidates;
    // Installed copy before the build tree's: an installed program must never load a model from the
    // source checkout it happened to be built in.
    if (!sources.environment.isEmpty()) candidates << sources.environment;
    if (!sources.applicationDir.isEmpty())
        candidates << QDir(sources.applicationDir).filePath(QStringLiteral("../share/gemma-desk/models/default.gemma"));
    if (!sources.compiledIn.isEmpty()) candidates << sources.compiledIn;
    for (const QString& candidate : candidates) {
        const QFileInfo info(candidate);
        if (info.isFile() && info.isReadable()) return QDir::cleanPath(info.absoluteFilePath());
    }
    return std::nullopt;
}

QString packagePathForFolder(const AppPaths& paths, const QString& modelFolder) {
    // Folder name for a readable file name, plus a short hash of the full path so two checkouts
    // called "gemma-4" in different places do not overwrite each other's package.
    const QString absolute = QFileInfo(modelFolder).absoluteFilePath();
    const QByteArray hash = QCryptographicHash::hash(absolute.toUtf8(), QCryptographicHash::Sha1).toHex().left(8);
    QString name = QFileInfo(absolute).fileName();
    if (name.isEmpty()) name = QStringLiteral("model");
    return QDir(paths.modelsDir()).filePath(QStringLiteral("%1-%2.gemma").arg(name, QString::fromLatin1(hash)));
}

}  // namespace desk
