#include "DeskApplication.h"

#include <QApplication>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QIcon>
#include <QMessageBox>
#include <spdlog/spdlog.h>

#include "AppSettings.h"
#include "ChatSession.h"
#include "ConversationStore.h"
#include "EngineController.h"
#include "Logging.h"
#include "gemma/Engine.h"
#include "ChatView.h"
#include "Composer.h"
#include "ConversationSidebar.h"
#include "MainWindow.h"
#include "ModelDialog.h"
#include "PerfPanel.h"
#include "SettingsPanel.h"

// Resources of a static library must be registered by name, outside any namespace.
static void initDeskResources() { Q_INIT_RESOURCE(gemma_desk); }

#ifndef GEMMA_DESK_VERSION
#define GEMMA_DESK_VERSION "0.0.0"
#endif

namespace desk {

QString deskVersion() { return QStringLiteral(GEMMA_DESK_VERSION); }

namespace {

deskui::PerfStepSample toSample(const gemma::StepStats& step) {
    deskui::PerfStepSample sample;
    sample.position = step.position;
    sample.wallMs = step.wallMs;
    sample.bucketMs.reserve(gemma::kBucketCount);
    for (double ms : step.bucketMs) sample.bucketMs.push_back(ms);
    for (int launches : step.launches) sample.launches += launches;
    sample.graph = step.graph;
    sample.instrumented = step.instrumented;
    return sample;
}

deskui::SamplingValues toUi(const SamplingSettings& sampling) {
    return {sampling.temperature, sampling.topK,      sampling.topP, sampling.minP,
            sampling.repeatPenalty, sampling.maxTokens, sampling.seed};
}

SamplingSettings fromUi(const deskui::SamplingValues& values) {
    SamplingSettings sampling;
    sampling.temperature = values.temperature;
    sampling.topK = values.topK;
    sampling.topP = values.topP;
    sampling.minP = values.minP;
    sampling.repeatPenalty = values.repeatPenalty;
    sampling.maxTokens = values.maxTokens;
    sampling.seed = values.seed;
    return sampling;
}

gemma::Device toDevice(deskui::ModelChoice::Device device) {
    switch (device) {
    case deskui::ModelChoice::Device::Gpu: return gemma::Device::Cuda;
    case deskui::ModelChoice::Device::Cpu: return gemma::Device::Cpu;
    case deskui::ModelChoice::Device::Auto: break;
    }
    return gemma::Device::Auto;
}

deskui::ModelChoice::Device fromDevice(gemma::Device device) {
    if (device == gemma::Device::Cuda) return deskui::ModelChoice::Device::Gpu;
    if (device == gemma::Device::Cpu) return deskui::ModelChoice::Device::Cpu;
    return deskui::ModelChoice::Device::Auto;
}

deskui::ThemeMode toUi(ThemeChoice theme) {
    if (theme == ThemeChoice::Light) return deskui::ThemeMode::Light;
    if (theme == ThemeChoice::Dark) return deskui::ThemeMode::Dark;
    return deskui::ThemeMode::System;
}

}  // namespace

DeskApplication::DeskApplication(std::unique_ptr<ChatEngine> engine, AppPaths paths, QObject* parent)
    : QObject(parent), pendingEngine_(std::move(engine)), paths_(std::move(paths)) {}

DeskApplication::~DeskApplication() { shutdown(); }

bool DeskApplication::initialize(QString* error) {
    if (!paths_.ensureDirectories(error)) return false;
    settings_ = std::make_unique<AppSettings>(paths_.settingsPath());
    if (auto* application = qobject_cast<QApplication*>(QCoreApplication::instance()))
        deskui::Theme::apply(*application, toUi(settings_->theme()));
    store_ = std::make_unique<ConversationStore>();
    if (!store_->open(paths_.databasePath(), error)) return false;
    controller_ = std::make_unique<EngineController>(std::move(pendingEngine_));
    session_ = std::make_unique<ChatSession>(controller_.get(), store_.get());
    session_->setDefaultSampling(settings_->defaultSampling());
    window_ = std::make_unique<deskui::MainWindow>();
    initDeskResources();
    QIcon icon;
    for (int size : {16, 32, 64, 256}) icon.addFile(QStringLiteral(":/gemma-desk/icons/app-%1.png").arg(size));
    window_->setAppIcon(icon);
    window_->setAboutText(aboutHtml());
    window_->chatView()->setModel(session_->chatModel());
    window_->sidebar()->setModel(session_->conversationList());
    if (!settings_->windowGeometry().isEmpty()) window_->restoreGeometry(settings_->windowGeometry());
    window_->setSidePanelVisible(settings_->perfPanelVisible());
    QStringList bucketNames;
    for (int bucket = 0; bucket < gemma::kBucketCount; ++bucket)
        bucketNames << QString::fromLatin1(bucketLabel(static_cast<gemma::Bucket>(bucket)));
    window_->perfPanel()->setBucketNames(bucketNames);
    connectViews();
    connectEngine();
    session_->newConversation();
    return true;
}

void DeskApplication::connectViews() {
    deskui::MainWindow* window = window_.get();
    ChatSession* session = session_.get();
    connect(window, &deskui::MainWindow::newChatRequested, session, &ChatSession::newConversation);
    connect(window->sidebar(), &deskui::ConversationSidebar::conversationSelected, session,
            &ChatSession::openConversation);
    connect(window->sidebar(), &deskui::ConversationSidebar::renameRequested, session, &ChatSession::renameConversation);
    connect(window->sidebar(), &deskui::ConversationSidebar::deleteRequested, session, &ChatSession::deleteConversation);
    connect(window->sidebar(), &deskui::ConversationSidebar::searchTextChanged, session, &ChatSession::setSearchFilter);
    connect(window->composer(), &deskui::Composer::sendRequested, session, &ChatSession::send);
    connect(window->composer(), &deskui::Composer::editSubmitted, session, &ChatSession::editAndResend);
    connect(window, &deskui::MainWindow::stopRequested, session, &ChatSession::stop);
    connect(window, &deskui::MainWindow::regenerateRequested, session, &ChatSession::regenerate);
    connect(window->settingsPanel(), &deskui::SettingsPanel::samplingChanged, this,
            [this](const deskui::SamplingValues& values) {
                session_->setSampling(fromUi(values));
                settings_->setDefaultSampling(fromUi(values));  // new chats start from the last choice
                session_->setDefaultSampling(fromUi(values));
            });
    connect(window->settingsPanel(), &deskui::SettingsPanel::systemPromptChanged, session, &ChatSession::setSystemPrompt);

    connect(session, &ChatSession::generatingChanged, window, &deskui::MainWindow::setGenerating);
    connect(session, &ChatSession::currentConversationChanged, this, [this](qint64 id, const QString& title) {
        window_->setConversationTitle(title);
        window_->sidebar()->setCurrentConversation(id);
    });
    connect(session, &ChatSession::settingsLoaded, this, [this](const QString& prompt, const SamplingSettings& sampling) {
        window_->settingsPanel()->setValues(prompt, toUi(sampling));
    });
    connect(session, &ChatSession::errorOccurred, window, &deskui::MainWindow::showError);

    connect(window, &deskui::MainWindow::modelDialogRequested, this, [this] {
        deskui::ModelChoice initial;
        initial.path = settings_->lastModelPath();
        initial.kind = QFileInfo(initial.path).isDir() ? deskui::ModelChoice::Kind::HuggingFaceFolder
                                                       : deskui::ModelChoice::Kind::PackageFile;
        initial.device = fromDevice(settings_->device());
        initial.contextAllocation = settings_->contextAllocation();
        window_->openModelDialog(initial);
    });
    connect(window, &deskui::MainWindow::openModelRequested, this, &DeskApplication::openModel);
    connect(window, &deskui::MainWindow::estimateRequested, this, [this](const deskui::ModelChoice& choice) {
        if (choice.kind != deskui::ModelChoice::Kind::PackageFile) return;
        gemma::OpenOptions options;
        options.device = toDevice(choice.device);
        options.contextAllocation = choice.contextAllocation;
        controller_->estimateMemory(choice.path, options);
    });
    connect(window, &deskui::MainWindow::cancelTaskRequested, controller_.get(), &EngineController::cancelTask);
    connect(window, &deskui::MainWindow::exportConversationRequested, this,
            [this](const QString& format, const QString& path) {
                QFile file(path);
                const QByteArray data =
                    format == QLatin1String("md") ? session_->exportMarkdown().toUtf8() : session_->exportJson();
                if (!file.open(QIODevice::WriteOnly | QIODevice::Truncate) || file.write(data) != data.size())
                    window_->showError(tr("Could not write %1: %2").arg(path, file.errorString()));
            });
    connect(window, &deskui::MainWindow::themeRequested, this, [this](deskui::ThemeMode mode) {
        settings_->setTheme(mode == deskui::ThemeMode::Dark    ? ThemeChoice::Dark
                            : mode == deskui::ThemeMode::Light ? ThemeChoice::Light
                                                               : ThemeChoice::System);
        if (auto* application = qobject_cast<QApplication*>(QCoreApplication::instance()))
            deskui::Theme::apply(*application, mode);
    });
    connect(window, &deskui::MainWindow::sidePanelVisibilityChanged, this,
            [this](bool visible) { settings_->setPerfPanelVisible(visible); });
    connect(window, &deskui::MainWindow::closing, this, &DeskApplication::shutdown);
}

void DeskApplication::connectEngine() {
    EngineController* controller = controller_.get();
    deskui::PerfPanel* panel = window_->perfPanel();
    connect(controller, &EngineController::tokensArrived, panel,
            [panel](quint64, const QString&, const QVector<gemma::StepStats>& steps) {
                QVector<deskui::PerfStepSample> samples;
                samples.reserve(steps.size());
                // The first token of a reply carries the prefill of the whole prompt: it is not a
                // decode step, and charting it would dwarf every real one.
                for (const gemma::StepStats& step : steps) {
                    if (step.positions == 1) samples.push_back(toSample(step));
                }
                if (!samples.isEmpty()) panel->appendSamples(samples);
            });
    connect(controller, &EngineController::loadStarted, this, [this](const QString& what) {
        loadingName_ = QFileInfo(what).completeBaseName();
        window_->hideError();
        window_->showTask(tr("Loading %1\u2026").arg(loadingName_), 0.0, true);
        window_->setModelStatus({deskui::ModelStatusView::State::Loading, loadingName_, what});
    });
    connect(controller, &EngineController::loadProgress, this, [this](double fraction, const QString& stage) {
        window_->showTask(tr("Loading %1: %2").arg(loadingName_, stage), fraction, true);
    });
    connect(controller, &EngineController::conversionProgress, this, [this](double fraction, const QString& stage) {
        window_->showTask(tr("Converting %1 to FP4: %2").arg(loadingName_, stage), fraction, true);
    });
    connect(controller, &EngineController::modelLoaded, this, [this](const gemma::ModelInfo& info) {
        window_->hideTask();
        const QString name = QString::fromStdString(info.name);
        const QString detail = tr("%1 \u00b7 %2 \u00b7 %3 layers \u00b7 KV %4K")
                                   .arg(QString::fromStdString(info.backend), QString::fromStdString(info.quantization))
                                   .arg(info.layers)
                                   .arg(info.contextAllocation / 1024);
        window_->setModelStatus({deskui::ModelStatusView::State::Ready, name, detail});
        deskui::PerfPanel* perf = window_->perfPanel();
        perf->setTraffic(info.weightBytes, info.kvBytesPerPosition);
        perf->setBandwidthCeiling(controller_->bandwidthCeilingGBps());
        perf->setBackendText(tr("%1 on %2 \u00b7 %3 streamed per token")
                                  .arg(name, QString::fromStdString(info.backend), deskui::formatBytes(info.weightBytes)));
        spdlog::info("Model ready: {} on {}", info.name, info.backend);
        emit modelReady();
    });
    connect(controller, &EngineController::modelLoadFailed, this, [this](const QString& message) {
        window_->hideTask();
        window_->showError(message);
        if (auto info = controller_->modelInfo()) {
            // The previous model is still loaded and usable.
            window_->setModelStatus({deskui::ModelStatusView::State::Ready, QString::fromStdString(info->name), {}});
        } else {
            window_->setModelStatus({deskui::ModelStatusView::State::NoModel, {}, {}});
        }
        emit modelFailed(message);
    });
    connect(controller, &EngineController::memoryEstimated, this,
            [this](const QString&, const gemma::MemoryEstimate& estimate) {
                if (auto* dialog = window_->modelDialog())
                    dialog->setEstimate({estimate.weightBytes, estimate.kvCacheBytes, estimate.workspaceBytes});
            });
    connect(controller, &EngineController::memoryEstimateFailed, this, [this](const QString&, const QString& message) {
        if (auto* dialog = window_->modelDialog()) dialog->setEstimateError(message);
    });
    connect(panel, &deskui::PerfPanel::sweepRequested, this, [this] {
        if (!controller_->isModelLoaded()) {
            window_->perfPanel()->setSweepMessage(tr("Load a model first."));
        } else if (!controller_->runAllocationSweep()) {
            window_->perfPanel()->setSweepMessage(tr("The engine is busy; try again when the reply is done."));
        }
    });
    connect(panel, &deskui::PerfPanel::sweepCancelRequested, controller, &EngineController::cancelTask);
    connect(controller, &EngineController::sweepStarted, panel, [panel] {
        panel->clearSweep();
        panel->setSweepRunning(true);
    });
    connect(controller, &EngineController::sweepProgress, panel, &deskui::PerfPanel::setSweepProgress);
    connect(controller, &EngineController::sweepPointReady, panel, [panel](const gemma::DecodeBenchmarkResult& result) {
        panel->addSweepPoint({result.contextAllocation, result.tokensPerSecond, result.msPerToken});
    });
    connect(controller, &EngineController::sweepFinished, panel, [panel](bool completed, const QString& message) {
        panel->setSweepRunning(false);
        panel->setSweepMessage(completed ? QObject::tr("Done: the same positions decoded with each allocation.") : message);
    });
}

void DeskApplication::openModel(const deskui::ModelChoice& choice) {
    gemma::OpenOptions options;
    options.device = toDevice(choice.device);
    options.contextAllocation = choice.contextAllocation;
    settings_->setDevice(options.device);
    settings_->setContextAllocation(options.contextAllocation);
    settings_->setLastModelPath(choice.path);
    const QFileInfo info(choice.path);
    if (!info.exists()) {
        window_->showError(tr("%1 does not exist.").arg(choice.path));
        return;
    }
    if (choice.kind == deskui::ModelChoice::Kind::HuggingFaceFolder || info.isDir()) {
        controller_->convertAndLoad(choice.path, packagePathForFolder(paths_, choice.path), options);
    } else {
        controller_->loadModel(choice.path, options);
    }
}

void DeskApplication::start(const std::optional<QString>& modelPath, bool showWindow, bool lookForModels) {
    if (showWindow) window_->show();
    std::optional<QString> toLoad = modelPath;
    if (!toLoad && lookForModels) {
        const QString last = settings_->lastModelPath();
        if (!last.isEmpty() && QFileInfo(last).isFile()) toLoad = last;
    }
    if (!toLoad && lookForModels) toLoad = findDefaultModel(defaultModelSources());
    if (!toLoad) {
        spdlog::info("No model to load at start; showing the open-a-model state");
        return;
    }
    deskui::ModelChoice choice;
    choice.path = *toLoad;
    choice.kind = QFileInfo(*toLoad).isDir() ? deskui::ModelChoice::Kind::HuggingFaceFolder
                                             : deskui::ModelChoice::Kind::PackageFile;
    choice.device = fromDevice(settings_->device());
    choice.contextAllocation = settings_->contextAllocation();
    gemma::OpenOptions options;
    options.device = settings_->device();
    options.contextAllocation = settings_->contextAllocation();
    if (choice.kind == deskui::ModelChoice::Kind::HuggingFaceFolder)
        controller_->convertAndLoad(choice.path, packagePathForFolder(paths_, choice.path), options);
    else
        controller_->loadModel(choice.path, options);
}

void DeskApplication::shutdown() {
    if (shutDown_ || !controller_) return;
    shutDown_ = true;
    if (window_) {
        settings_->setWindowGeometry(window_->saveGeometry());
        settings_->setPerfPanelVisible(window_->isSidePanelVisible());
    }
    session_->finishNow();
    controller_->shutdown();
    settings_->sync();
    spdlog::info("Shut down cleanly");
}

QString DeskApplication::aboutHtml() const {
    return tr("<h3>Gemma Desk %1</h3>"
              "<p>Local chat with Gemma 4 on a hand-written FP4 decode engine.</p>"
              "<p>Engine %2 &middot; Qt %3</p>"
              "<p>Data folder: <code>%4</code><br>Log file: <code>%5</code></p>")
        .arg(deskVersion(), QString::fromLatin1(gemma::engineVersion()), QString::fromLatin1(qVersion()),
             paths_.dataDir.toHtmlEscaped(),
             (logFilePath().isEmpty() ? tr("(not written)") : logFilePath()).toHtmlEscaped());
}

}  // namespace desk
