// Per-conversation settings: the system prompt and the sampling parameters.
#pragma once

#include <QWidget>

#include "UiTypes.h"

class QDoubleSpinBox;
class QPlainTextEdit;
class QSpinBox;
class QTimer;

namespace deskui {

class SettingsPanel : public QWidget {
    Q_OBJECT
public:
    explicit SettingsPanel(QWidget* parent = nullptr);

    // Shows a conversation's values without emitting change signals.
    void setValues(const QString& systemPrompt, const SamplingValues& sampling);
    SamplingValues sampling() const;
    QString systemPrompt() const;

signals:
    void samplingChanged(const deskui::SamplingValues& sampling);
    void systemPromptChanged(const QString& systemPrompt);

private:
    QPlainTextEdit* systemPrompt_;
    QDoubleSpinBox* temperature_;
    QSpinBox* topK_;
    QDoubleSpinBox* topP_;
    QDoubleSpinBox* minP_;
    QDoubleSpinBox* repeatPenalty_;
    QSpinBox* maxTokens_;
    QSpinBox* seed_;
    QTimer* promptDelay_;
    bool loading_ = false;
};

}  // namespace deskui
