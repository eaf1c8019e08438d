#include "MarkdownSegments.h"

#include <QStringList>

namespace deskui {

namespace {
// A fence is ``` or ~~~ after at most three spaces of indentation (CommonMark).
bool isFence(const QString& line, QString* info) {
    int indent = 0;
    while (indent < line.size() && indent < 4 && line[indent] == QLatin1Char(' ')) ++indent;
    if (indent > 3) return false;
    const QString rest = line.mid(indent);
    if (!rest.startsWith(QLatin1String("```")) && !rest.startsWith(QLatin1String("~~~"))) return false;
    if (info) *info = rest.mid(3).trimmed();
    return true;
}
}  // namespace

QVector<MarkdownSegment> splitMarkdown(const QString& markdown, int maxProseChars) {
    QVector<MarkdownSegment> segments;
    const QStringList lines = markdown.split(QLatin1Char('\n'));
    MarkdownSegment current;
    bool inCode = false;
    auto closeCurrent = [&] {
        if (current.code || !current.text.trimmed().isEmpty()) segments.push_back(current);
        current = MarkdownSegment{};
    };
    for (int index = 0; index < lines.size(); ++index) {
        const QString& line = lines[index];
        QString info;
        if (isFence(line, &info)) {
            if (!inCode) {
                closeCurrent();
                current.code = true;
                current.language = info;
                inCode = true;
            } else {
                closeCurrent();
                inCode = false;
            }
            continue;
        }
        if (inCode) {
            if (!current.text.isEmpty()) current.text += QLatin1Char('\n');
            current.text += line;
            continue;
        }
        if (line.trimmed().isEmpty() && current.text.size() >= maxProseChars) {
            closeCurrent();
            continue;
        }
        if (index > 0 && !current.text.isEmpty()) current.text += QLatin1Char('\n');
        current.text += line;
    }
    closeCurrent();  // an unterminated fence while streaming still renders as code
    return segments;
}

}  // namespace deskui
