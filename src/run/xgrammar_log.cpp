// xgrammar_log.h: compiled into the xgrammar library itself (with XGRAMMAR_LOG_CUSTOMIZE, every program that
// links it needs these two functions).
#include "xgrammar_log.h"

#include <support/logging.h>  // xgrammar's (its cpp/ folder)

#include <ctime>
#include <iomanip>
#include <iostream>
#include <sstream>

namespace minigpt {
namespace {
thread_local std::vector<std::string>* t_warnings = nullptr;
}

XgrammarWarningCapture::XgrammarWarningCapture() : outer_(t_warnings) { t_warnings = &warnings_; }
XgrammarWarningCapture::~XgrammarWarningCapture() { t_warnings = outer_; }

}  // namespace minigpt

namespace xgrammar {

// As xgrammar's own LogFatal: an exception whose what() reads "[hh:mm:ss] file:line: message".
[[noreturn]] void LogFatalImpl(const std::string& file, int lineno, const std::string& message) {
  throw LogFatalError(file, lineno, message);
}

void LogMessageImpl(const std::string& file, int lineno, int level, const std::string& message) {
  if (level == XGRAMMAR_LOG_LEVEL_WARNING && minigpt::t_warnings != nullptr) {
    minigpt::t_warnings->push_back(message);
    return;
  }
  static const char* const kLevels[] = {": ", ": Debug: ", ": Warning: "};
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  std::ostringstream s;
  s << "[" << std::put_time(&tm, "%H:%M:%S") << "] " << file << ":" << lineno
    << kLevels[level >= 0 && level <= 2 ? level : 0] << message << "\n";
  std::cerr << s.str();
}

}  // namespace xgrammar
