#include "Theme.h"

#include <QApplication>
#include <QPalette>
#include <QStyleFactory>

namespace deskui {

namespace {

ThemeColors currentColors;
ThemeMode currentMode = ThemeMode::System;
bool systemPaletteIsDark = false;
bool systemPaletteProbed = false;

ThemeColors lightColors() {
    ThemeColors c;
    c.dark = false;
    c.window = QColor("#f6f7f9");
    c.surface = QColor("#ffffff");
    c.sidebar = QColor("#eef0f4");
    c.border = QColor("#dfe2e8");
    c.text = QColor("#1d2129");
    c.mutedText = QColor("#6b7280");
    c.accent = QColor("#3867f0");
    c.accentText = QColor("#ffffff");
    c.userBubble = QColor("#e7edfd");
    c.codeBackground = QColor("#f3f4f7");
    c.errorBackground = QColor("#fdecec");
    c.errorText = QColor("#a3202b");
    c.chartGrid = QColor("#e5e7eb");
    const char* buckets[] = {"#3867f0", "#8b5cf6", "#14b8a6", "#f59e0b", "#ec4899", "#9ca3af", "#22c55e", "#ef4444"};
    for (int i = 0; i < 8; ++i) c.bucketColors[i] = QColor(buckets[i]);
    return c;
}

ThemeColors darkColors() {
    ThemeColors c;
    c.dark = true;
    c.window = QColor("#1b1c20");
    c.surface = QColor("#222429");
    c.sidebar = QColor("#16171a");
    c.border = QColor("#33363d");
    c.text = QColor("#e7e9ee");
    c.mutedText = QColor("#9aa1ad");
    c.accent = QColor("#7c9cff");
    c.accentText = QColor("#0f1220");
    c.userBubble = QColor("#2c3350");
    c.codeBackground = QColor("#17181c");
    c.errorBackground = QColor("#3a1d22");
    c.errorText = QColor("#ff9aa5");
    c.chartGrid = QColor("#30333a");
    const char* buckets[] = {"#7c9cff", "#b18cff", "#2dd4bf", "#fbbf24", "#f472b6", "#6b7280", "#4ade80", "#f87171"};
    for (int i = 0; i < 8; ++i) c.bucketColors[i] = QColor(buckets[i]);
    return c;
}

QPalette paletteFor(const ThemeColors& c) {
    QPalette palette;
    palette.setColor(QPalette::Window, c.window);
    palette.setColor(QPalette::WindowText, c.text);
    palette.setColor(QPalette::Base, c.surface);
    palette.setColor(QPalette::AlternateBase, c.sidebar);
    palette.setColor(QPalette::Text, c.text);
    palette.setColor(QPalette::Button, c.surface);
    palette.setColor(QPalette::ButtonText, c.text);
    palette.setColor(QPalette::Highlight, c.accent);
    palette.setColor(QPalette::HighlightedText, c.accentText);
    palette.setColor(QPalette::ToolTipBase, c.surface);
    palette.setColor(QPalette::ToolTipText, c.text);
    palette.setColor(QPalette::PlaceholderText, c.mutedText);
    palette.setColor(QPalette::Link, c.accent);
    palette.setColor(QPalette::Mid, c.border);
    palette.setColor(QPalette::Midlight, c.border);
    palette.setColor(QPalette::Disabled, QPalette::Text, c.mutedText);
    palette.setColor(QPalette::Disabled, QPalette::ButtonText, c.mutedText);
    palette.setColor(QPalette::Disabled, QPalette::WindowText, c.mutedText);
    return palette;
}

}  // namespace

const ThemeColors& Theme::colors() {
    if (!currentColors.window.isValid()) currentColors = lightColors();
    return currentColors;
}

ThemeMode Theme::mode() { return currentMode; }

void Theme::apply(QApplication& application, ThemeMode mode) {
    if (!systemPaletteProbed) {
        // Qt 6.4 has no color-scheme query; the platform's default palette tells light from dark.
        systemPaletteProbed = true;
        systemPaletteIsDark = application.palette().color(QPalette::Window).lightness() < 128;
    }
    currentMode = mode;
    const bool dark = mode == ThemeMode::Dark || (mode == ThemeMode::System && systemPaletteIsDark);
    currentColors = dark ? darkColors() : lightColors();
    // Set the base style once: replacing it while a style sheet wraps it leaves the sheet's
    // proxy pointing at the deleted style.
    static bool styleSet = false;
    if (!styleSet) {
        application.setStyleSheet(QString());
        application.setStyle(QStyleFactory::create(QStringLiteral("Fusion")));
        styleSet = true;
    }
    application.setPalette(paletteFor(currentColors));
    application.setStyleSheet(styleSheet(currentColors));
}

QString Theme::styleSheet(const ThemeColors& c) {
    QString css = QStringLiteral(R"CSS(
QMainWindow, QDialog { background: %window; }
QToolTip { background: %surface; color: %text; border: 1px solid %border; padding: 4px; }
#Sidebar { background: %sidebar; border-right: 1px solid %border; }
#SidebarTitle { font-size: 16px; font-weight: 600; color: %text; }
#SidebarList { background: transparent; border: none; outline: none; }
#SidebarSearch, QLineEdit, QPlainTextEdit#SystemPrompt, QSpinBox, QDoubleSpinBox, QComboBox {
  background: %surface; border: 1px solid %border; border-radius: 8px; padding: 5px 8px; color: %text; }
QLineEdit:focus, QPlainTextEdit:focus, QSpinBox:focus, QDoubleSpinBox:focus { border-color: %accent; }
#ChatColumn { background: %window; }
#ChatHeader { background: %window; border-bottom: 1px solid %border; }
#ChatTitle { font-size: 15px; font-weight: 600; }
#ModelPill { background: %surface; border: 1px solid %border; border-radius: 12px; padding: 3px 10px; color: %muted; }
#ChatScroll, #ChatScroll > QWidget > QWidget { background: %window; border: none; }
#ComposerFrame { background: %surface; border: 1px solid %border; border-radius: 14px; }
#ComposerEdit { background: transparent; border: none; font-size: 14px; }
#ComposerHint { color: %muted; font-size: 11px; }
#EditBanner { color: %accent; font-size: 12px; }
QPushButton { background: %surface; border: 1px solid %border; border-radius: 8px; padding: 6px 14px; color: %text; }
QPushButton:hover { border-color: %accent; }
QPushButton:disabled { color: %muted; }
QPushButton#PrimaryButton, QPushButton#SendButton { background: %accent; color: %accentText; border: none; font-weight: 600; }
QPushButton#SendButton { border-radius: 16px; min-width: 32px; min-height: 32px; padding: 0 14px; }
QPushButton#SendButton:disabled { background: %border; color: %muted; }
QPushButton#StopButton { background: %text; color: %window; border: none; border-radius: 16px; min-height: 32px; padding: 0 14px; font-weight: 600; }
QToolButton#MessageAction, QPushButton#LinkButton { background: transparent; border: none; color: %muted; padding: 2px 6px; font-size: 12px; }
QToolButton#MessageAction:hover, QPushButton#LinkButton:hover { color: %accent; }
#UserBubble { background: %userBubble; border-radius: 14px; }
#Avatar { background: %accent; color: %accentText; border-radius: 14px; font-weight: 700; }
#AuthorLabel { font-weight: 600; }
#StatsLabel { color: %muted; font-size: 11px; }
#ErrorLabel { color: %errorText; font-size: 12px; }
#CodeBlock { background: %code; border: 1px solid %border; border-radius: 10px; }
#CodeHeader { color: %muted; font-size: 11px; }
#CodeText { background: transparent; border: none; }
#Banner { background: %surface; border: 1px solid %border; border-radius: 10px; }
#Banner[kind="error"] { background: %errorBg; border-color: %errorText; }
#BannerText[kind="error"] { color: %errorText; }
#EmptyTitle { font-size: 26px; font-weight: 600; }
#EmptyBody { color: %muted; font-size: 14px; }
#SidePanel { background: %window; border-left: 1px solid %border; }
QTabWidget::pane { border: none; }
QTabBar::tab { background: transparent; padding: 8px 14px; color: %muted; border: none; border-bottom: 2px solid transparent; }
QTabBar::tab:selected { color: %text; border-bottom: 2px solid %accent; }
#PanelSection { font-weight: 600; color: %text; margin-top: 6px; }
#MetricTile { background: %surface; border: 1px solid %border; border-radius: 10px; }
#MetricValue { font-size: 18px; font-weight: 600; }
#MetricValueSmall { font-size: 13px; font-weight: 600; }
#MetricLabel { color: %muted; font-size: 11px; }
QProgressBar { background: %border; border: none; border-radius: 3px; max-height: 6px; }
QProgressBar::chunk { background: %accent; border-radius: 3px; }
QScrollBar:vertical { background: transparent; width: 10px; margin: 2px; }
QScrollBar::handle:vertical { background: %border; border-radius: 4px; min-height: 30px; }
QScrollBar::add-line, QScrollBar::sub-line { height: 0; width: 0; }
QSplitter::handle { background: %border; }
QMenuBar { background: %window; }
QMenu { background: %surface; border: 1px solid %border; }
QMenu::item:selected { background: %userBubble; color: %text; }
)CSS");
    css.replace(QStringLiteral("%window"), c.window.name())
        .replace(QStringLiteral("%surface"), c.surface.name())
        .replace(QStringLiteral("%sidebar"), c.sidebar.name())
        .replace(QStringLiteral("%border"), c.border.name())
        .replace(QStringLiteral("%text"), c.text.name())
        .replace(QStringLiteral("%muted"), c.mutedText.name())
        .replace(QStringLiteral("%accentText"), c.accentText.name())
        .replace(QStringLiteral("%accent"), c.accent.name())
        .replace(QStringLiteral("%userBubble"), c.userBubble.name())
        .replace(QStringLiteral("%code"), c.codeBackground.name())
        .replace(QStringLiteral("%errorBg"), c.errorBackground.name())
        .replace(QStringLiteral("%errorText"), c.errorText.name());
    return css;
}

}  // namespace deskui
