// The app's look: Fusion style with a light or dark palette (following the system unless the user
// picked one) and one style sheet keyed on object names. Widgets that paint themselves read the
// current colors from Theme::colors().
#pragma once

#include <QColor>
#include <QString>

class QApplication;

namespace deskui {

enum class ThemeMode { System, Light, Dark };

struct ThemeColors {
    bool dark = false;
    QColor window, surface, sidebar, border, text, mutedText, accent, accentText, userBubble, codeBackground,
        errorBackground, errorText, chartGrid;
    QColor bucketColors[8];
};

class Theme {
public:
    // Applies the theme to the application. Call once at start (after QApplication exists) and
    // again whenever the user switches; widgets refresh through QEvent::PaletteChange.
    static void apply(QApplication& application, ThemeMode mode);
    static const ThemeColors& colors();
    static ThemeMode mode();

private:
    static QString styleSheet(const ThemeColors& colors);
};

}  // namespace deskui
