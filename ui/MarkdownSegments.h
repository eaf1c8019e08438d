// Splits a message's Markdown into prose and fenced code segments. Prose renders through
// QTextDocument::setMarkdown; code blocks get their own widget with a Copy button. During
// streaming only the last segment changes, so re-rendering costs one segment per batch, not the
// whole message; long prose is also cut at paragraph breaks to keep each segment small.
#pragma once

#include <QString>
#include <QVector>

namespace deskui {

struct MarkdownSegment {
    bool code = false;
    QString language;  // code only: the fence's info string
    QString text;      // prose: Markdown; code: the code without fences
    bool operator==(const MarkdownSegment&) const = default;
};

QVector<MarkdownSegment> splitMarkdown(const QString& markdown, int maxProseChars = 1500);

}  // namespace deskui
