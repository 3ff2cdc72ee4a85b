// The admin commands' escaping output stream (see escaped_output.hpp).
#include "admin/escaped_output.hpp"

#include "common/control_escape.hpp"

namespace kiqd::admin {

EscapedOutput::EscapedOutput(std::ostream& target) : std::ostream(nullptr), buffer_(target) {
    rdbuf(&buffer_);
}

EscapedOutput::~EscapedOutput() {
    buffer_.write_pending();
}

void EscapedOutput::Buffer::put(char c) {
    if (c != '\n') {
        line_ += c;
        return;
    }
    target_ << escape_control(line_) << '\n';
    line_.clear();
}

void EscapedOutput::Buffer::write_pending() {
    if (!line_.empty()) target_ << escape_control(line_);
    line_.clear();
    target_.flush();
}

EscapedOutput::Buffer::int_type EscapedOutput::Buffer::overflow(int_type c) {
    if (!traits_type::eq_int_type(c, traits_type::eof())) put(traits_type::to_char_type(c));
    return traits_type::not_eof(c);
}

std::streamsize EscapedOutput::Buffer::xsputn(const char* s, std::streamsize n) {
    for (std::streamsize i = 0; i < n; ++i) put(s[i]);
    return n;
}

// std::endl and std::flush: the line is complete (endl) or the caller wants it out now.
int EscapedOutput::Buffer::sync() {
    write_pending();
    return 0;
}

}  // namespace kiqd::admin
