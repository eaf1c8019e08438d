// Typed access to the app's persistent settings (QSettings, INI file under the data folder), so
// keys and defaults live in one place instead of being spelled out at every call site.
#pragma once

#include <QByteArray>
#include <QSettings>
#include <QString>
#include <memory>

#include "ChatTypes.h"
#include "gemma/Engine.h"

namespace desk {

enum class ThemeChoice { System, Light, Dark };

class AppSettings {
public:
    explicit AppSettings(const QString& iniPath);

    gemma::Device device() const;
    void setDevice(gemma::Device device);
    int contextAllocation() const;  // KV slots, 4096..131072
    void setContextAllocation(int allocation);
    QString lastModelPath() const;
    void setLastModelPath(const QString& path);
    SamplingSettings defaultSampling() const;
    void setDefaultSampling(const SamplingSettings& sampling);
    ThemeChoice theme() const;
    void setTheme(ThemeChoice theme);
    QByteArray windowGeometry() const;
    void setWindowGeometry(const QByteArray& geometry);
    QByteArray windowState() const;
    void setWindowState(const QByteArray& state);
    bool perfPanelVisible() const;
    void setPerfPanelVisible(bool visible);

    void sync();

private:
    std::unique_ptr<QSettings> settings_;
};

}  // namespace desk
