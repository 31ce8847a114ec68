// A guest console's output captured in a temporary file (GuestConsole writes to a FILE*).
#pragma once

#include <cstdio>
#include <string>

namespace vmm::testing {

class ConsoleCapture {
 public:
  ConsoleCapture() : file_(std::tmpfile()) {}
  ~ConsoleCapture() { std::fclose(file_); }
  ConsoleCapture(const ConsoleCapture&) = delete;
  ConsoleCapture& operator=(const ConsoleCapture&) = delete;

  std::FILE* file() const { return file_; }
  // Everything written so far.
  std::string text() const {
    std::fflush(file_);
    std::rewind(file_);
    std::string s;
    for (int c; (c = std::fgetc(file_)) != EOF;) s.push_back(static_cast<char>(c));
    return s;
  }

 private:
  std::FILE* file_;
};

}  // namespace vmm::testing
