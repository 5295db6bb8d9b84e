// xgrammar's log, routed through minigpt (xgrammar is built with XGRAMMAR_LOG_CUSTOMIZE;
// src/run/xgrammar_log.cpp gives it its two log functions): its errors are thrown as before, and its warnings
// are collected while a WarningCapture is alive on the thread, else printed to stderr as xgrammar prints
// them. The JSON Schema converter warns when it drops a keyword it cannot enforce (multipleOf on a number, a
// oneOf it cannot prove disjoint, minLength beside a pattern, ...), which GrammarCompiler::json_schema()
// turns into a refusal.
#pragma once

#include <string>
#include <vector>

namespace minigpt {

class XgrammarWarningCapture {
 public:
  XgrammarWarningCapture();
  ~XgrammarWarningCapture();
  XgrammarWarningCapture(const XgrammarWarningCapture&) = delete;
  XgrammarWarningCapture& operator=(const XgrammarWarningCapture&) = delete;
  // The warnings xgrammar logged on this thread since construction, each its message alone.
  const std::vector<std::string>& warnings() const { return warnings_; }

 private:
  std::vector<std::string> warnings_;
  std::vector<std::string>* outer_;
};

}  // namespace minigpt
