// Where the app keeps its data, and where it looks for the bundled default model.
#pragma once

#include <QString>
#include <optional>

namespace desk {

struct AppPaths {
    QString dataDir;  // GEMMA_DESK_DATA_DIR or the platform's AppDataLocation
    QString databasePath() const;
    QString logDir() const;
    QString modelsDir() const;  // converted packages
    QString settingsPath() const;

    static AppPaths standard();
    bool ensureDirectories(QString* error = nullptr) const;
};

// The default model, searched in order: $GEMMA_DESK_DEFAULT_MODEL, the installed
// <exe dir>/../share/gemma-desk/models/default.gemma, then the compile-time GEMMA_DEFAULT_MODEL_PATH.
// Arguments exist so a test can pin each source; nullopt when no candidate file exists.
struct DefaultModelSources {
    QString environment;
    QString compiledIn;
    QString applicationDir;
};
DefaultModelSources defaultModelSources();
std::optional<QString> findDefaultModel(const DefaultModelSources& sources);

// Where the package converted from a Hugging Face folder is written.
QString packagePathForFolder(const AppPaths& paths, const QString& modelFolder);

}  // namespace desk
