#pragma once
// EscapedOutput: the stream every admin command and `kiqd enqueue` writes to. It passes each
// line on to the real stream (stdout, stderr) with everything but its line break escaped
// (common/control_escape.hpp), so no string from Redis that a call site forgot to escape can
// move the cursor, clear the screen or retitle the terminal. Newlines inside such a string are
// the call site's job: commands escape every stored string they print (print_table does for
// its cells). Single-threaded, as the admin CLI is.
#include <ostream>
#include <streambuf>
#include <string>

namespace kiqd::admin {

class EscapedOutput : public std::ostream {
  public:
    explicit EscapedOutput(std::ostream& target);
    ~EscapedOutput() override;  // writes a last line that has no line break yet

  private:
    class Buffer : public std::streambuf {
      public:
        explicit Buffer(std::ostream& target) : target_(target) {}
        void write_pending();  // escapes and writes what is held, then flushes the target

      protected:
        int_type overflow(int_type c) override;
        std::streamsize xsputn(const char* s, std::streamsize n) override;
        int sync() override;

      private:
        void put(char c);
        std::ostream& target_;
        std::string line_;  // the current line, up to its line break
    };
    Buffer buffer_;
};

}  // namespace kiqd::admin
