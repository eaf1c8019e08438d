#include "AppSettings.h"

#include <algorithm>

namespace desk {

AppSettings::AppSettings(const QString& iniPath)
    : settings_(std::make_unique<QSettings>(iniPath, QSettings::IniFormat)) {}

gemma::Device AppSettings::device() const {
    const QString value = settings_->value("engine/device", "auto").toString();
    if (value == QLatin1String("cpu")) return gemma::Device::Cpu;
    if (value == QLatin1String("gpu")) return gemma::Device::Cuda;
    return gemma::Device::Auto;
}

void AppSettings::setDevice(gemma::Device device) {
    const char* name = "auto";
    if (device == gemma::Device::Cpu) name = "cpu";
    if (device == gemma::Device::Cuda) name = "gpu";
    settings_->setValue("engine/device", QString::fromLatin1(name));
}

int AppSettings::contextAllocation() const {
    return std::clamp(settings_->value("engine/contextAllocation", 4096).toInt(), 4096, 131072);
}
void AppSettings::setContextAllocation(int allocation) { settings_->setValue("engine/contextAllocation", allocation); }

QString AppSettings::lastModelPath() const { return settings_->value("engine/lastModelPath").toString(); }
void AppSettings::setLastModelPath(const QString& path) { settings_->setValue("engine/lastModelPath", path); }

SamplingSettings AppSettings::defaultSampling() const {
    SamplingSettings sampling;
    sampling.temperature = settings_->value("sampling/temperature", sampling.temperature).toDouble();
    sampling.topK = settings_->value("sampling/topK", sampling.topK).toInt();
    sampling.topP = settings_->value("sampling/topP", sampling.topP).toDouble();
    sampling.minP = settings_->value("sampling/minP", sampling.minP).toDouble();
    sampling.repeatPenalty = settings_->value("sampling/repeatPenalty", sampling.repeatPenalty).toDouble();
    sampling.maxTokens = settings_->value("sampling/maxTokens", sampling.maxTokens).toInt();
    sampling.seed = settings_->value("sampling/seed", QVariant::fromValue<qulonglong>(0)).toULongLong();
    return sampling;
}

void AppSettings::setDefaultSampling(const SamplingSettings& sampling) {
    settings_->setValue("sampling/temperature", sampling.temperature);
    settings_->setValue("sampling/topK", sampling.topK);
    settings_->setValue("sampling/topP", sampling.topP);
    settings_->setValue("sampling/minP", sampling.minP);
    settings_->setValue("sampling/repeatPenalty", sampling.repeatPenalty);
    settings_->setValue("sampling/maxTokens", sampling.maxTokens);
    settings_->setValue("sampling/seed", QVariant::fromValue<qulonglong>(sampling.seed));
}

ThemeChoice AppSettings::theme() const {
    const QString value = settings_->value("ui/theme", "system").toString();
    if (value == QLatin1String("light")) return ThemeChoice::Light;
    if (value == QLatin1String("dark")) return ThemeChoice::Dark;
    return ThemeChoice::System;
}

void AppSettings::setTheme(ThemeChoice theme) {
    const char* name = "system";
    if (theme == ThemeChoice::Light) name = "light";
    if (theme == ThemeChoice::Dark) name = "dark";
    settings_->setValue("ui/theme", QString::fromLatin1(name));
}

QByteArray AppSettings::windowGeometry() const { return settings_->value("ui/geometry").toByteArray(); }
void AppSettings::setWindowGeometry(const QByteArray& geometry) { settings_->setValue("ui/geometry", geometry); }
QByteArray AppSettings::windowState() const { return settings_->value("ui/state").toByteArray(); }
void AppSettings::setWindowState(const QByteArray& state) { settings_->setValue("ui/state", state); }
bool AppSettings::perfPanelVisible() const { return settings_->value("ui/perfPanelVisible", true).toBool(); }
void AppSettings::setPerfPanelVisible(bool visible) { settings_->setValue("ui/perfPanelVisible", visible); }

void AppSettings::sync() { settings_->sync(); }

}  // namespace desk
