#include "MainWindow.h"

#include <QAction>
#include <QActionGroup>
#include <QApplication>
#include <QCloseEvent>
#include <QFileDialog>
#include <QHBoxLayout>
#include <QIcon>
#include <QLabel>
#include <QMenuBar>
#include <QMessageBox>
#include <QProgressBar>
#include <QRegularExpression>
#include <QPushButton>
#include <QShortcut>
#include <QSplitter>
#include <QStyle>
#include <QTabBar>
#include <QTabWidget>
#include <QVBoxLayout>

#include "ChatView.h"
#include "Composer.h"
#include "ConversationSidebar.h"
#include "ModelDialog.h"
#include "PerfPanel.h"
#include "SettingsPanel.h"

namespace deskui {

namespace {
QWidget* makeBanner(QWidget* parent, const QString& kind, QLabel** text) {
    auto* banner = new QFrame(parent);
    banner->setObjectName(QStringLiteral("Banner"));
    banner->setProperty("kind", kind);
    auto* layout = new QHBoxLayout(banner);
    layout->setContentsMargins(14, 8, 8, 8);
    *text = new QLabel(banner);
    (*text)->setObjectName(QStringLiteral("BannerText"));
    (*text)->setProperty("kind", kind);
    (*text)->setWordWrap(true);
    (*text)->setTextInteractionFlags(Qt::TextSelectableByMouse);
    layout->addWidget(*text, 1);
    banner->hide();
    return banner;
}
}  // namespace

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
    setWindowTitle(tr("Gemma Desk"));
    resize(1360, 860);
    splitter_ = new QSplitter(Qt::Horizontal, this);
    splitter_->setHandleWidth(1);
    splitter_->setChildrenCollapsible(false);

    sidebar_ = new ConversationSidebar(splitter_);
    sidebar_->setMinimumWidth(220);
    sidebar_->setMaximumWidth(360);
    splitter_->addWidget(sidebar_);
    splitter_->addWidget(buildChatColumn());

    sidePanel_ = new QTabWidget(splitter_);
    sidePanel_->setObjectName(QStringLiteral("SidePanel"));
    sidePanel_->setDocumentMode(true);
    sidePanel_->tabBar()->setDrawBase(false);
    sidePanel_->setMinimumWidth(360);
    settingsPanel_ = new SettingsPanel(sidePanel_);
    perfPanel_ = new PerfPanel(sidePanel_);
    sidePanel_->addTab(perfPanel_, tr("Performance"));
    sidePanel_->addTab(settingsPanel_, tr("Chat settings"));
    splitter_->addWidget(sidePanel_);
    splitter_->setStretchFactor(0, 0);
    splitter_->setStretchFactor(1, 1);
    splitter_->setStretchFactor(2, 0);
    splitter_->setSizes({260, 680, 420});
    setCentralWidget(splitter_);

    connect(sidebar_, &ConversationSidebar::newChatRequested, this, &MainWindow::newChatRequested);
    connect(composer_, &Composer::stopRequested, this, &MainWindow::stopRequested);
    connect(chatView_, &ChatView::regenerateRequested, this, &MainWindow::regenerateRequested);
    connect(chatView_, &ChatView::editRequested, composer_, &Composer::beginEdit);
    connect(chatView_, &ChatView::placeholderActionTriggered, this, &MainWindow::modelDialogRequested);
    buildMenus();
    setModelStatus({});
}

QWidget* MainWindow::buildChatColumn() {
    auto* column = new QWidget(splitter_);
    column->setObjectName(QStringLiteral("ChatColumn"));
    auto* layout = new QVBoxLayout(column);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->setSpacing(0);

    auto* header = new QFrame(column);
    header->setObjectName(QStringLiteral("ChatHeader"));
    auto* headerLayout = new QHBoxLayout(header);
    headerLayout->setContentsMargins(20, 10, 14, 10);
    headerLayout->setSpacing(10);
    titleLabel_ = new QLabel(tr("New chat"), header);
    titleLabel_->setObjectName(QStringLiteral("ChatTitle"));
    modelPill_ = new QLabel(header);
    modelPill_->setObjectName(QStringLiteral("ModelPill"));
    auto* modelButton = new QPushButton(tr("Model\u2026"), header);
    modelButton->setToolTip(tr("Open or switch model (Ctrl+O)"));
    panelToggle_ = new QPushButton(tr("Panel"), header);
    panelToggle_->setCheckable(true);
    panelToggle_->setChecked(true);
    panelToggle_->setToolTip(tr("Show or hide the performance and settings panel"));
    headerLayout->addWidget(titleLabel_, 1);
    headerLayout->addWidget(modelPill_);
    headerLayout->addWidget(modelButton);
    headerLayout->addWidget(panelToggle_);
    layout->addWidget(header);
    connect(modelButton, &QPushButton::clicked, this, &MainWindow::modelDialogRequested);
    connect(panelToggle_, &QPushButton::toggled, this, [this](bool visible) {
        setSidePanelVisible(visible);
        emit sidePanelVisibilityChanged(visible);
    });

    auto* notices = new QVBoxLayout;
    notices->setContentsMargins(20, 8, 20, 0);
    notices->setSpacing(6);
    taskBanner_ = makeBanner(column, QStringLiteral("task"), &taskText_);
    taskProgress_ = new QProgressBar(taskBanner_);
    taskProgress_->setRange(0, 1000);
    taskProgress_->setTextVisible(false);
    taskProgress_->setFixedWidth(160);
    taskCancel_ = new QPushButton(tr("Cancel"), taskBanner_);
    taskBanner_->layout()->addWidget(taskProgress_);
    taskBanner_->layout()->addWidget(taskCancel_);
    connect(taskCancel_, &QPushButton::clicked, this, &MainWindow::cancelTaskRequested);
    errorBanner_ = makeBanner(column, QStringLiteral("error"), &errorText_);
    auto* dismiss = new QPushButton(tr("Dismiss"), errorBanner_);
    errorBanner_->layout()->addWidget(dismiss);
    connect(dismiss, &QPushButton::clicked, this, &MainWindow::hideError);
    notices->addWidget(taskBanner_);
    notices->addWidget(errorBanner_);
    layout->addLayout(notices);

    chatView_ = new ChatView(column);
    layout->addWidget(chatView_, 1);
    composer_ = new Composer(column);
    layout->addWidget(composer_);
    return column;
}

void MainWindow::buildMenus() {
    QMenu* file = menuBar()->addMenu(tr("&File"));
    QAction* openModel = file->addAction(tr("Open &model\u2026"), this, &MainWindow::modelDialogRequested);
    openModel->setShortcut(QKeySequence::Open);
    file->addSeparator();
    file->addAction(tr("Export conversation as &Markdown\u2026"), this,
                    [this] { exportConversation(QStringLiteral("md")); });
    file->addAction(tr("Export conversation as &JSON\u2026"), this,
                    [this] { exportConversation(QStringLiteral("json")); });
    file->addSeparator();
    QAction* quit = file->addAction(tr("&Quit"), this, &QWidget::close);
    quit->setShortcut(QKeySequence::Quit);

    QMenu* chat = menuBar()->addMenu(tr("&Chat"));
    QAction* newChat = chat->addAction(tr("&New chat"), this, &MainWindow::newChatRequested);
    newChat->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_N));
    QAction* regenerate = chat->addAction(tr("&Regenerate reply"), this, &MainWindow::regenerateRequested);
    regenerate->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_R));
    QAction* stop = chat->addAction(tr("&Stop generating"), this, &MainWindow::stopRequested);
    stop->setShortcut(QKeySequence(Qt::Key_Escape));
    stop->setShortcutContext(Qt::WindowShortcut);

    QMenu* view = menuBar()->addMenu(tr("&View"));
    sidePanelAction_ = view->addAction(tr("Show side &panel"));
    sidePanelAction_->setCheckable(true);
    sidePanelAction_->setChecked(true);
    connect(sidePanelAction_, &QAction::toggled, this, [this](bool visible) {
        setSidePanelVisible(visible);
        emit sidePanelVisibilityChanged(visible);
    });
    QMenu* theme = view->addMenu(tr("&Theme"));
    auto* themes = new QActionGroup(this);
    const std::pair<QString, ThemeMode> modes[] = {
        {tr("Follow system"), ThemeMode::System}, {tr("Light"), ThemeMode::Light}, {tr("Dark"), ThemeMode::Dark}};
    for (const auto& [label, mode] : modes) {
        QAction* action = theme->addAction(label);
        action->setCheckable(true);
        action->setChecked(Theme::mode() == mode);
        themes->addAction(action);
        connect(action, &QAction::triggered, this, [this, mode = mode] { emit themeRequested(mode); });
    }

    QMenu* help = menuBar()->addMenu(tr("&Help"));
    help->addAction(tr("&About Gemma Desk"), this,
                    [this] { QMessageBox::about(this, tr("About Gemma Desk"), aboutText_); });
}

void MainWindow::setModelStatus(const ModelStatusView& status) {
    switch (status.state) {
    case ModelStatusView::State::NoModel: modelPill_->setText(tr("No model loaded")); break;
    case ModelStatusView::State::Loading: modelPill_->setText(tr("Loading %1\u2026").arg(status.name)); break;
    case ModelStatusView::State::Ready:
        modelPill_->setText(QStringLiteral("<span style='color:#22c55e'>&#9679;</span>&nbsp; %1").arg(status.name.toHtmlEscaped()));
        break;
    case ModelStatusView::State::Failed: modelPill_->setText(tr("Model failed to load")); break;
    }
    modelPill_->setToolTip(status.detail);
    const bool ready = status.state == ModelStatusView::State::Ready;
    composer_->setInputEnabled(ready, ready ? tr("Message Gemma") : tr("Load a model to start chatting"));
    if (ready) {
        chatView_->setPlaceholder(tr("How can I help?"),
                                  tr("%1 is ready. Ask a question, paste some code, or set a system prompt in "
                                     "Chat settings.")
                                      .arg(status.name));
    } else if (status.state == ModelStatusView::State::Loading) {
        chatView_->setPlaceholder(tr("Loading the model\u2026"), tr("This takes a moment the first time."));
    } else {
        chatView_->setPlaceholder(tr("Welcome to Gemma Desk"),
                                  tr("Open a Gemma 4 model to start: a Gemma Desk package, or the Hugging Face "
                                     "folder you downloaded (it is converted once)."),
                                  tr("Open a model\u2026"));
    }
}

void MainWindow::setConversationTitle(const QString& title) { titleLabel_->setText(title); }

void MainWindow::setGenerating(bool generating) {
    composer_->setGenerating(generating);
    chatView_->setRegenerateEnabled(!generating);
}

void MainWindow::showTask(const QString& text, double fraction, bool cancellable) {
    taskText_->setText(text);
    taskProgress_->setVisible(fraction >= 0);
    taskProgress_->setValue(static_cast<int>(std::clamp(fraction, 0.0, 1.0) * 1000));
    taskCancel_->setVisible(cancellable);
    taskBanner_->show();
}

void MainWindow::hideTask() { taskBanner_->hide(); }

void MainWindow::showError(const QString& message) {
    errorText_->setText(message);
    errorBanner_->show();
}

void MainWindow::hideError() { errorBanner_->hide(); }
QString MainWindow::errorText() const { return errorBanner_->isVisible() ? errorText_->text() : QString(); }

void MainWindow::setAboutText(const QString& html) { aboutText_ = html; }

void MainWindow::setAppIcon(const QIcon& icon) {
    setWindowIcon(icon);
    sidebar_->setLogo(icon.pixmap(QSize(24, 24), devicePixelRatio()));
}

void MainWindow::setSidePanelVisible(bool visible) {
    sidePanel_->setVisible(visible);
    const QSignalBlocker blockAction(sidePanelAction_);
    const QSignalBlocker blockButton(panelToggle_);
    sidePanelAction_->setChecked(visible);
    panelToggle_->setChecked(visible);
}

bool MainWindow::isSidePanelVisible() const { return !sidePanel_->isHidden(); }

void MainWindow::openModelDialog(const ModelChoice& initial) {
    if (!modelDialog_) {
        modelDialog_ = new ModelDialog(this);
        connect(modelDialog_, &ModelDialog::estimateRequested, this, &MainWindow::estimateRequested);
        connect(modelDialog_, &QDialog::accepted, this, [this] { emit openModelRequested(modelDialog_->choice()); });
    }
    modelDialog_->setChoice(initial);
    modelDialog_->open();
}

void MainWindow::exportConversation(const QString& format) {
    const QString filter = format == QLatin1String("md") ? tr("Markdown (*.md)") : tr("JSON (*.json)");
    QString suggested = titleLabel_->text().simplified();
    suggested.replace(QRegularExpression(QStringLiteral("[^A-Za-z0-9 _-]")), QString());
    if (suggested.isEmpty()) suggested = QStringLiteral("conversation");
    const QString path = QFileDialog::getSaveFileName(this, tr("Export conversation"),
                                                      suggested + QLatin1Char('.') + format, filter);
    if (!path.isEmpty()) emit exportConversationRequested(format, path);
}

void MainWindow::closeEvent(QCloseEvent* event) {
    emit closing();
    QMainWindow::closeEvent(event);
}

}  // namespace deskui
