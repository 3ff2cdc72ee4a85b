#include "handlers/child_output.hpp"

#include <fmt/format.h>

#include "common/log_fields.hpp"

namespace kiqd {
namespace {

bool is_continuation(char c) {
    return (static_cast<unsigned char>(c) & 0xC0) == 0x80;
}

}  // namespace

LineSink::LineSink(const char* stream, size_t max_line, spdlog::logger* log,
                   std::deque<std::string>* tail, size_t tail_lines, size_t tail_bytes)
    : stream_(stream),
      max_line_(max_line),
      log_(log),
      tail_(tail),
      tail_lines_(tail_lines),
      tail_bytes_(tail_bytes) {}

void LineSink::feed(const char* data, size_t n, const LineLabels& labels) {
    buf_.append(data, n);
    size_t start = 0;
    for (;;) {
        size_t nl = buf_.find('\n', start);
        if (nl == std::string::npos) {
            if (buf_.size() - start >= max_line_) {
                // Cut before a UTF-8 continuation byte rather than through a character.
                size_t piece = max_line_;
                for (int back = 0; back < 3 && piece > 1 && is_continuation(buf_[start + piece]);
                     ++back)
                    --piece;
                emit(buf_.substr(start, piece), labels);
                start += piece;
                continue;
            }
            break;
        }
        emit(buf_.substr(start, nl - start), labels);
        start = nl + 1;
    }
    buf_.erase(0, start);
}

void LineSink::finish(const LineLabels& labels) {
    if (!buf_.empty()) emit(std::move(buf_), labels);
    buf_.clear();
}

void LineSink::emit(std::string line, const LineLabels& labels) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (log_) {
        LogLine l;
        if (!labels.job_class.empty()) l.field("class", labels.job_class);
        if (!labels.jid.empty()) l.field("jid", labels.jid);
        if (!labels.runner.empty()) l.field("runner", labels.runner);
        // ("pid" is the JSON formatter's own key: kiqd's pid.)
        if (labels.pid > 0) l.field("runner_pid", std::to_string(labels.pid));
        log_->info(
            l.json_field("stream", stream_).message(line, fmt::format("{}: {}", stream_, line)));
    }
    if (!tail_) return;
    tail_->push_back(std::move(line));
    size_t bytes = 0;
    for (const auto& l : *tail_) bytes += l.size() + 1;
    while (tail_->size() > 1 && (tail_->size() > tail_lines_ || bytes > tail_bytes_)) {
        bytes -= tail_->front().size() + 1;
        tail_->pop_front();
    }
    if (tail_->size() == 1 && tail_->front().size() > tail_bytes_)
        tail_->front().erase(0, tail_->front().size() - tail_bytes_);
}

}  // namespace kiqd
