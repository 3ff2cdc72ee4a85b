#include "server/logging.hpp"

#include <fcntl.h>
#include <spdlog/async.h>
#include <spdlog/details/file_helper.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

namespace kiqd {
namespace {

// The length of the well-formed UTF-8 sequence at s[i] (1 to 4 bytes), its code point in `cp`;
// 0 when s[i] starts none: a stray continuation byte, an overlong form, a surrogate, a value
// beyond U+10FFFF, or a sequence cut short.
size_t utf8_sequence(std::string_view s, size_t i, char32_t& cp) {
    auto byte = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
    const unsigned char lead = byte(0);
    size_t n;
    char32_t min;
    if (lead < 0x80) {
        cp = lead;
        return 1;
    } else if ((lead & 0xE0) == 0xC0) {
        n = 2, cp = lead & 0x1F, min = 0x80;
    } else if ((lead & 0xF0) == 0xE0) {
        n = 3, cp = lead & 0x0F, min = 0x800;
    } else if ((lead & 0xF8) == 0xF0) {
        n = 4, cp = lead & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    if (i + n > s.size()) return 0;
    for (size_t k = 1; k < n; ++k) {
        if ((byte(k) & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (byte(k) & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return n;
}

// %* in a pattern: the message with everything a terminal or a log reader would act on escaped,
// so that no text from a job (class names, exec output, error messages) can start a new log
// line, move the cursor or clear the screen. Every log line goes through here, whichever call
// site wrote it.
//   text: \n \r \t as such; other C0 controls, DEL and bytes that are not UTF-8 as \xNN; C1
//         controls (U+0080-U+009F, which some terminals obey) as \u0080-\u009f.
//   json: the inside of a JSON string: " and \ escaped, controls (C0, DEL, C1) as \u00NN,
//         bytes that are not UTF-8 replaced by U+FFFD, so that every line parses.
class EscapedMessage final : public spdlog::custom_flag_formatter {
  public:
    enum class Style { text, json };
    explicit EscapedMessage(Style style) : style_(style) {}

    void format(const spdlog::details::log_msg& msg, const std::tm&,
                spdlog::memory_buf_t& dest) override {
        const std::string_view s(msg.payload.data(), msg.payload.size());
        const bool json = style_ == Style::json;
        size_t i = 0;
        while (i < s.size()) {
            size_t plain = i;  // printable ASCII goes through in runs
            while (plain < s.size() && printable_ascii(s[plain]) &&
                   !(json && (s[plain] == '"' || s[plain] == '\\')))
                ++plain;
            dest.append(s.data() + i, s.data() + plain);
            i = plain;
            if (i == s.size()) break;
            char32_t cp = 0;
            const size_t n = utf8_sequence(s, i, cp);
            if (n == 0) {  // not UTF-8
                if (json)
                    dest.append(std::string_view("\xEF\xBF\xBD"));
                else
                    append_hex(dest, "\\x", static_cast<unsigned char>(s[i]));
                i += 1;
                continue;
            }
            if (const char* named = named_escape(cp, json)) {
                dest.append(std::string_view(named));
            } else if (cp < 0x20 || cp == 0x7f) {
                append_hex(dest, json ? "\\u00" : "\\x", cp);
            } else if (cp >= 0x80 && cp <= 0x9f) {
                append_hex(dest, "\\u00", cp);
            } else {
                dest.append(s.data() + i, s.data() + i + n);
            }
            i += n;
        }
    }
    std::unique_ptr<custom_flag_formatter> clone() const override {
        return std::make_unique<EscapedMessage>(style_);
    }

  private:
    static bool printable_ascii(char c) { return c >= 0x20 && c < 0x7f; }  // false for >= 0x80
    static const char* named_escape(char32_t cp, bool json) {
        switch (cp) {
            case '\n':
                return "\\n";
            case '\r':
                return "\\r";
            case '\t':
                return "\\t";
            case '"':
                return json ? "\\\"" : nullptr;
            case '\\':
                return json ? "\\\\" : nullptr;
            default:
                return nullptr;
        }
    }
    // prefix and two hex digits: every value escaped this way is below 0x100.
    static void append_hex(spdlog::memory_buf_t& dest, std::string_view prefix, char32_t value) {
        static const char* hex = "0123456789abcdef";
        dest.append(prefix);
        dest.push_back(hex[(value >> 4) & 0xf]);
        dest.push_back(hex[value & 0xf]);
    }

    Style style_;
};

// Writes to stdout through stdio's buffer and flushes only when asked (every second, on warn and
// above, at exit). spdlog's stdout sink flushes after every line, which cost a write(2) per log
// line — a quarter of the throughput of a no-op job.
class BufferedStdoutSink final : public spdlog::sinks::base_sink<std::mutex> {
  protected:
    void sink_it_(const spdlog::details::log_msg& msg) override {
        spdlog::memory_buf_t formatted;
        formatter_->format(msg, formatted);
        std::fwrite(formatted.data(), 1, formatted.size(), stdout);
    }
    void flush_() override { std::fflush(stdout); }
};

// A file sink that can reopen its file at the configured path: after logrotate (or anyone) has
// renamed the file, SIGHUP makes new lines go to a new file at the original path. reopen() runs
// on the launcher's io thread and write on the logger's writer thread; base_sink's mutex
// serialises them.
class ReopenableFileSink final : public spdlog::sinks::base_sink<std::mutex> {
  public:
    explicit ReopenableFileSink(const std::string& path) : file_(close_on_exec_handlers()) {
        file_.open(path, false);
    }
    void reopen() {
        std::lock_guard<std::mutex> lock(mutex_);
        file_.flush();
        file_.reopen(false);  // append: never truncate what is (again) at the path
    }

  protected:
    void sink_it_(const spdlog::details::log_msg& msg) override {
        spdlog::memory_buf_t formatted;
        formatter_->format(msg, formatted);
        file_.write(formatted);
    }
    void flush_() override { file_.flush(); }

  private:
    // spdlog opens the file with plain fopen (inheritable): mark it close-on-exec at every
    // (re)open, so that no exec handler's command can write into kiqd's log.
    static spdlog::file_event_handlers close_on_exec_handlers() {
        spdlog::file_event_handlers handlers;
        handlers.after_open = [](const spdlog::filename_t&, std::FILE* file) {
            ::fcntl(::fileno(file), F_SETFD, FD_CLOEXEC);
        };
        return handlers;
    }

    spdlog::details::file_helper file_;
};

// Every file sink made by make_logger, for reopen_log_files().
std::mutex file_sinks_mutex;
std::vector<std::weak_ptr<ReopenableFileSink>> file_sinks;

}  // namespace

void reopen_log_files() {
    std::lock_guard<std::mutex> lock(file_sinks_mutex);
    for (auto it = file_sinks.begin(); it != file_sinks.end();) {
        if (auto sink = it->lock()) {
            sink->reopen();
            ++it;
        } else {
            it = file_sinks.erase(it);
        }
    }
}

std::shared_ptr<spdlog::logger> make_logger(const LoggingConfig& config, bool verbose) {
    if (!spdlog::thread_pool()) spdlog::init_thread_pool(8192, 1);
    spdlog::sink_ptr sink;
    if (config.file.empty())
        sink = std::make_shared<BufferedStdoutSink>();
    else {
        auto file_sink = std::make_shared<ReopenableFileSink>(config.file);
        std::lock_guard<std::mutex> lock(file_sinks_mutex);
        file_sinks.push_back(file_sink);
        sink = std::move(file_sink);
    }
    // Blocking when the queue is full: slower, but no log line of a job is ever dropped.
    auto logger = std::make_shared<spdlog::async_logger>("kiqd", sink, spdlog::thread_pool(),
                                                         spdlog::async_overflow_policy::block);
    auto formatter = std::make_unique<spdlog::pattern_formatter>(spdlog::pattern_time_type::utc);
    if (config.format == "json") {
        formatter->add_flag<EscapedMessage>('*', EscapedMessage::Style::json)
            .set_pattern(
                R"({"ts":"%Y-%m-%dT%H:%M:%S.%eZ","level":"%l","pid":%P,"tid":%t,"msg":"%*"})");
    } else {
        formatter->add_flag<EscapedMessage>('*', EscapedMessage::Style::text)
            .set_pattern("%Y-%m-%dT%H:%M:%S.%eZ pid=%P tid=%t %l: %*");
    }
    logger->set_formatter(std::move(formatter));
    logger->set_level(verbose ? spdlog::level::debug : spdlog::level::from_str(config.level));
    logger->flush_on(spdlog::level::warn);
    spdlog::drop("kiqd");
    spdlog::register_logger(logger);
    spdlog::flush_every(std::chrono::seconds(1));  // stdout may be a pipe (journald)
    return logger;
}

void drain_log(spdlog::logger& log) noexcept {
    try {
        log.flush();  // an asynchronous logger queues this behind every line logged so far
        if (auto pool = spdlog::thread_pool())
            for (int waited_ms = 0; pool->queue_size() > 0 && waited_ms < 2000; ++waited_ms)
                std::this_thread::sleep_for(std::chrono::milliseconds(1));
        // The queue is empty: every line before the flush has been written (the pool's one
        // thread takes them in order); whatever is left in a sink's buffer goes out now.
        for (auto& sink : log.sinks()) sink->flush();
    } catch (...) {  // nothing to report it to
    }
}

}  // namespace kiqd
