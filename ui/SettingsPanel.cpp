#include "SettingsPanel.h"

#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QLabel>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QTimer>
#include <QVBoxLayout>

namespace deskui {

SettingsPanel::SettingsPanel(QWidget* parent) : QWidget(parent) {
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(16, 12, 16, 12);
    layout->setSpacing(8);
    auto* promptTitle = new QLabel(tr("System prompt"), this);
    promptTitle->setObjectName(QStringLiteral("PanelSection"));
    layout->addWidget(promptTitle);
    systemPrompt_ = new QPlainTextEdit(this);
    systemPrompt_->setObjectName(QStringLiteral("SystemPrompt"));
    systemPrompt_->setPlaceholderText(tr("Optional instructions for this conversation, e.g. \u201cAnswer briefly.\u201d"));
    systemPrompt_->setMaximumHeight(110);
    layout->addWidget(systemPrompt_);

    auto* samplingTitle = new QLabel(tr("Sampling"), this);
    samplingTitle->setObjectName(QStringLiteral("PanelSection"));
    layout->addWidget(samplingTitle);
    auto* form = new QFormLayout;
    form->setLabelAlignment(Qt::AlignLeft);
    form->setHorizontalSpacing(16);
    form->setVerticalSpacing(8);
    auto makeDouble = [this](double minimum, double maximum, double step, int decimals) {
        auto* box = new QDoubleSpinBox(this);
        box->setRange(minimum, maximum);
        box->setSingleStep(step);
        box->setDecimals(decimals);
        return box;
    };
    temperature_ = makeDouble(0.0, 2.0, 0.05, 2);
    temperature_->setToolTip(tr("0 = greedy (always the most likely token)"));
    topK_ = new QSpinBox(this);
    topK_->setRange(0, 1000);
    topK_->setSpecialValueText(tr("off"));
    topP_ = makeDouble(0.0, 1.0, 0.01, 2);
    minP_ = makeDouble(0.0, 1.0, 0.01, 2);
    minP_->setSpecialValueText(tr("off"));
    repeatPenalty_ = makeDouble(1.0, 2.0, 0.05, 2);
    repeatPenalty_->setSpecialValueText(tr("off"));
    maxTokens_ = new QSpinBox(this);
    maxTokens_->setRange(1, 131072);
    seed_ = new QSpinBox(this);
    seed_->setRange(0, 2147483647);
    seed_->setSpecialValueText(tr("random"));
    form->addRow(tr("Temperature"), temperature_);
    form->addRow(tr("Top-k"), topK_);
    form->addRow(tr("Top-p"), topP_);
    form->addRow(tr("Min-p"), minP_);
    form->addRow(tr("Repetition penalty"), repeatPenalty_);
    form->addRow(tr("Max tokens"), maxTokens_);
    form->addRow(tr("Seed"), seed_);
    layout->addLayout(form);
    auto* reset = new QPushButton(tr("Reset to Gemma defaults"), this);
    layout->addWidget(reset, 0, Qt::AlignLeft);
    layout->addStretch(1);

    auto emitSampling = [this] {
        if (!loading_) emit samplingChanged(sampling());
    };
    for (QDoubleSpinBox* box : {temperature_, topP_, minP_, repeatPenalty_})
        connect(box, &QDoubleSpinBox::valueChanged, this, emitSampling);
    for (QSpinBox* box : {topK_, maxTokens_, seed_}) connect(box, &QSpinBox::valueChanged, this, emitSampling);
    connect(reset, &QPushButton::clicked, this, [this] {
        setValues(systemPrompt(), SamplingValues{});
        emit samplingChanged(sampling());
    });
    // The prompt is saved once typing pauses, not on every keystroke.
    promptDelay_ = new QTimer(this);
    promptDelay_->setSingleShot(true);
    promptDelay_->setInterval(400);
    connect(systemPrompt_, &QPlainTextEdit::textChanged, this, [this] {
        if (!loading_) promptDelay_->start();
    });
    connect(promptDelay_, &QTimer::timeout, this, [this] { emit systemPromptChanged(systemPrompt()); });
    setValues({}, SamplingValues{});
}

void SettingsPanel::setValues(const QString& systemPrompt, const SamplingValues& sampling) {
    loading_ = true;
    promptDelay_->stop();
    if (systemPrompt_->toPlainText() != systemPrompt) systemPrompt_->setPlainText(systemPrompt);
    temperature_->setValue(sampling.temperature);
    topK_->setValue(sampling.topK);
    topP_->setValue(sampling.topP);
    minP_->setValue(sampling.minP);
    repeatPenalty_->setValue(sampling.repeatPenalty);
    maxTokens_->setValue(sampling.maxTokens);
    seed_->setValue(static_cast<int>(std::min<quint64>(sampling.seed, 2147483647)));
    loading_ = false;
}

SamplingValues SettingsPanel::sampling() const {
    SamplingValues values;
    values.temperature = temperature_->value();
    values.topK = topK_->value();
    values.topP = topP_->value();
    values.minP = minP_->value();
    values.repeatPenalty = repeatPenalty_->value();
    values.maxTokens = maxTokens_->value();
    values.seed = static_cast<quint64>(seed_->value());
    return values;
}

QString SettingsPanel::systemPrompt() const { return systemPrompt_->toPlainText(); }

}  // namespace deskui
