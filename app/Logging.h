// spdlog to a rotating file under the data folder; Qt's own messages are routed there as well.
#pragma once

#include <QString>

namespace desk {

// Returns the log file's path (shown in About). Safe to call once per process.
QString initLogging(const QString& logDir, bool alsoToStderr);
QString logFilePath();

}  // namespace desk
