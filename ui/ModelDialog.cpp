#include "ModelDialog.h"

#include <QButtonGroup>
#include <QComboBox>
#include <QDialogButtonBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QRadioButton>
#include <QTimer>
#include <QVBoxLayout>

namespace deskui {

ModelDialog::ModelDialog(QWidget* parent) : QDialog(parent) {
    setWindowTitle(tr("Open model"));
    setMinimumWidth(520);
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(20, 18, 20, 16);
    layout->setSpacing(12);

    auto* kindRow = new QHBoxLayout;
    packageRadio_ = new QRadioButton(tr("Gemma Desk package (.gemma)"), this);
    folderRadio_ = new QRadioButton(tr("Hugging Face folder"), this);
    packageRadio_->setChecked(true);
    auto* group = new QButtonGroup(this);
    group->addButton(packageRadio_);
    group->addButton(folderRadio_);
    kindRow->addWidget(packageRadio_);
    kindRow->addWidget(folderRadio_);
    kindRow->addStretch(1);
    layout->addLayout(kindRow);

    auto* form = new QFormLayout;
    form->setHorizontalSpacing(14);
    form->setVerticalSpacing(10);
    auto* pathRow = new QHBoxLayout;
    path_ = new QLineEdit(this);
    path_->setPlaceholderText(tr("Choose a file or folder"));
    auto* browse = new QPushButton(tr("Browse\u2026"), this);
    pathRow->addWidget(path_, 1);
    pathRow->addWidget(browse);
    form->addRow(tr("Model"), pathRow);
    device_ = new QComboBox(this);
    device_->addItem(tr("Automatic (GPU when available)"), static_cast<int>(ModelChoice::Device::Auto));
    device_->addItem(tr("GPU (CUDA)"), static_cast<int>(ModelChoice::Device::Gpu));
    device_->addItem(tr("CPU (reference, slow)"), static_cast<int>(ModelChoice::Device::Cpu));
    form->addRow(tr("Device"), device_);
    allocation_ = new QComboBox(this);
    for (int allocation : allocationChoices())
        allocation_->addItem(QStringLiteral("%1K tokens").arg(allocation / 1024), allocation);
    allocation_->setToolTip(tr("KV-cache slots reserved for full-attention layers: the longest conversation "
                               "the model can hold. More slots need more memory."));
    form->addRow(tr("Context (KV)"), allocation_);
    estimate_ = new QLabel(tr("Choose a model to see how much memory it needs."), this);
    estimate_->setWordWrap(true);
    estimate_->setObjectName(QStringLiteral("MetricLabel"));
    form->addRow(tr("Memory"), estimate_);
    layout->addLayout(form);
    conversionNote_ = new QLabel(tr("The folder (config.json, *.safetensors, tokenizer.model) is converted once to "
                                    "an FP4 package in the app's data folder. This takes a few minutes and can be "
                                    "cancelled."),
                                 this);
    conversionNote_->setWordWrap(true);
    conversionNote_->setObjectName(QStringLiteral("MetricLabel"));
    conversionNote_->hide();
    layout->addWidget(conversionNote_);

    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Cancel, this);
    loadButton_ = buttons->addButton(tr("Load"), QDialogButtonBox::AcceptRole);
    loadButton_->setObjectName(QStringLiteral("PrimaryButton"));
    loadButton_->setEnabled(false);
    layout->addWidget(buttons);

    estimateDelay_ = new QTimer(this);
    estimateDelay_->setSingleShot(true);
    estimateDelay_->setInterval(250);
    connect(estimateDelay_, &QTimer::timeout, this, [this] {
        if (!path_->text().isEmpty()) emit estimateRequested(choice());
    });
    connect(browse, &QPushButton::clicked, this, &ModelDialog::browse);
    connect(path_, &QLineEdit::textChanged, this, &ModelDialog::choiceChanged);
    connect(packageRadio_, &QRadioButton::toggled, this, &ModelDialog::choiceChanged);
    connect(device_, &QComboBox::currentIndexChanged, this, &ModelDialog::choiceChanged);
    connect(allocation_, &QComboBox::currentIndexChanged, this, &ModelDialog::choiceChanged);
    connect(buttons, &QDialogButtonBox::accepted, this, &QDialog::accept);
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
}

void ModelDialog::browse() {
    QString path;
    if (folderRadio_->isChecked())
        path = QFileDialog::getExistingDirectory(this, tr("Choose a Hugging Face Gemma 4 folder"), path_->text());
    else
        path = QFileDialog::getOpenFileName(this, tr("Choose a Gemma Desk package"), path_->text(),
                                            tr("Gemma Desk packages (*.gemma);;All files (*)"));
    if (!path.isEmpty()) path_->setText(path);
}

void ModelDialog::choiceChanged() {
    const bool folder = folderRadio_->isChecked();
    conversionNote_->setVisible(folder);
    loadButton_->setEnabled(!path_->text().trimmed().isEmpty());
    if (folder) {
        // A folder has no package header to read until it is converted.
        estimate_->setText(tr("Estimated after conversion."));
        return;
    }
    estimate_->setText(path_->text().isEmpty() ? tr("Choose a model to see how much memory it needs.")
                                               : tr("Estimating\u2026"));
    estimateDelay_->start();
}

void ModelDialog::setChoice(const ModelChoice& choice) {
    (choice.kind == ModelChoice::Kind::HuggingFaceFolder ? folderRadio_ : packageRadio_)->setChecked(true);
    path_->setText(choice.path);
    device_->setCurrentIndex(std::max(0, device_->findData(static_cast<int>(choice.device))));
    const int allocationIndex = allocation_->findData(choice.contextAllocation);
    allocation_->setCurrentIndex(allocationIndex >= 0 ? allocationIndex : 0);
    choiceChanged();
}

ModelChoice ModelDialog::choice() const {
    ModelChoice choice;
    choice.kind = folderRadio_->isChecked() ? ModelChoice::Kind::HuggingFaceFolder : ModelChoice::Kind::PackageFile;
    choice.path = path_->text().trimmed();
    choice.device = static_cast<ModelChoice::Device>(device_->currentData().toInt());
    choice.contextAllocation = allocation_->currentData().toInt();
    return choice;
}

void ModelDialog::setEstimate(const MemoryEstimateView& estimate) {
    estimate_->setText(tr("%1 in total: weights %2, KV cache %3, workspace %4")
                           .arg(formatBytes(estimate.total()), formatBytes(estimate.weightBytes),
                                formatBytes(estimate.kvCacheBytes), formatBytes(estimate.workspaceBytes)));
}

void ModelDialog::setEstimateError(const QString& message) { estimate_->setText(message); }

}  // namespace deskui
