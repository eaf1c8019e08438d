// "Open model": a package file or a Hugging Face folder (converted once), the device, the KV
// allocation, and a memory estimate that the app fills in (estimateRequested -> setEstimate).
#pragma once

#include <QDialog>

#include "UiTypes.h"

class QButtonGroup;
class QComboBox;
class QLabel;
class QLineEdit;
class QRadioButton;
class QTimer;

namespace deskui {

class ModelDialog : public QDialog {
    Q_OBJECT
public:
    explicit ModelDialog(QWidget* parent = nullptr);

    void setChoice(const ModelChoice& choice);
    ModelChoice choice() const;
    void setEstimate(const MemoryEstimateView& estimate);
    void setEstimateError(const QString& message);

    static QVector<int> allocationChoices() { return {4096, 8192, 16384, 32768, 65536, 131072}; }

signals:
    void estimateRequested(const deskui::ModelChoice& choice);

private:
    void browse();
    void choiceChanged();

    QRadioButton* packageRadio_;
    QRadioButton* folderRadio_;
    QLineEdit* path_;
    QComboBox* device_;
    QComboBox* allocation_;
    QLabel* estimate_;
    QLabel* conversionNote_;
    QPushButton* loadButton_;
    QTimer* estimateDelay_;
};

}  // namespace deskui
