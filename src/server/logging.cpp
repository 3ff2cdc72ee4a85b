#include "server/logging.hpp"

#include <fcntl.h>
#include <spdlog/async.h>
#include <spdlog/details/file_helper.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

#include "common/control_escape.hpp"
#include "common/log_fields.hpp"

namespace kiqd {
namespace {

// %* in a pattern: the message with everything a terminal or a log reader would act on escaped
// (common/control_escape.hpp), so that no text from a job (class names, exec output, error
// messages) can start a new log line, move the cursor or clear the screen. Every log line goes
// through here, whichever call site wrote it. Text lines use the text style; JSON lines the JSON
// style, so that every line parses.
class EscapedMessage final : public spdlog::custom_flag_formatter {
  public:
    explicit EscapedMessage(EscapeStyle style) : style_(style) {}

    void format(const spdlog::details::log_msg& msg, const std::tm&,
                spdlog::memory_buf_t& dest) override {
        thread_local std::string escaped;  // the writer thread's, reused line after line
        escaped.clear();
        append_escaped(escaped, std::string_view(msg.payload.data(), msg.payload.size()), style_);
        dest.append(escaped.data(), escaped.data() + escaped.size());
    }
    std::unique_ptr<custom_flag_formatter> clone() const override {
        return std::make_unique<EscapedMessage>(style_);
    }

  private:
    EscapeStyle style_;
};

// %* of a JSON line: `"msg":"…"` and, for a LogLine (common/log_fields.hpp), its fields as
// further keys — `"class":"…","jid":"…","elapsed_ms":1.5` — so that the job's fields are keys of
// the line, not words inside msg. Every value goes through the JSON escaper.
class JsonMessage final : public spdlog::custom_flag_formatter {
  public:
    void format(const spdlog::details::log_msg& msg, const std::tm&,
                spdlog::memory_buf_t& dest) override {
        thread_local std::string out;
        out.assign("\"msg\":\"");
        const std::string_view payload(msg.payload.data(), msg.payload.size());
        if (auto line = decode_log_line(payload)) {
            append_escaped(out, line->event, EscapeStyle::json);
            out.push_back('"');
            for (const auto& f : line->fields) {
                out.append(",\"").append(f.key).append("\":");
                if (f.number) {
                    out.append(f.value);
                } else {
                    out.push_back('"');
                    append_escaped(out, f.value, EscapeStyle::json);
                    out.push_back('"');
                }
            }
        } else {
            append_escaped(out, payload, EscapeStyle::json);
            out.push_back('"');
        }
        dest.append(out.data(), out.data() + out.size());
    }
    std::unique_ptr<custom_flag_formatter> clone() const override {
        return std::make_unique<JsonMessage>();
    }
};

// %Q under journald: the syslog priority prefix (<3> error, <4> warning, <6> info, <7> debug)
// that journald strips and stores as the line's PRIORITY, so `journalctl -p warning` works.
class SyslogPriority final : public spdlog::custom_flag_formatter {
  public:
    void format(const spdlog::details::log_msg& msg, const std::tm&,
                spdlog::memory_buf_t& dest) override {
        static constexpr const char* kPrefix[] = {"<7>", "<7>", "<6>", "<4>", "<3>", "<2>", "<6>"};
        const auto level = static_cast<size_t>(msg.level);
        const char* prefix = kPrefix[level < std::size(kPrefix) ? level : 2];
        dest.append(prefix, prefix + 3);
    }
    std::unique_ptr<custom_flag_formatter> clone() const override {
        return std::make_unique<SyslogPriority>();
    }
};

// True when stdout is the stream systemd connected to the journal: $JOURNAL_STREAM names its
// device and inode ("dev:ino"), and they match stdout's (a redirected stdout does not match).
bool stdout_is_journal() {
    const char* stream = std::getenv("JOURNAL_STREAM");
    if (!stream) return false;
    unsigned long long dev = 0, ino = 0;
    if (std::sscanf(stream, "%llu:%llu", &dev, &ino) != 2) return false;
    struct stat st {};
    if (::fstat(STDOUT_FILENO, &st) != 0) return false;
    return static_cast<unsigned long long>(st.st_dev) == dev &&
           static_cast<unsigned long long>(st.st_ino) == ino;
}

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
    // Under systemd with stdout on the journal: a priority prefix on every line, and no
    // timestamp or pid in front of the text (the journal records both).
    const bool journal = config.file.empty() && stdout_is_journal();
    formatter->add_flag<SyslogPriority>('Q');
    const bool json = config.format == "json";
    set_structured_log_lines(json);
    if (json) {
        formatter->add_flag<JsonMessage>('*').set_pattern(
            std::string(journal ? "%Q" : "") +
            R"({"ts":"%Y-%m-%dT%H:%M:%S.%eZ","level":"%l","pid":%P,"tid":%t,%*})");
    } else {
        formatter->add_flag<EscapedMessage>('*', EscapeStyle::text)
            .set_pattern(journal ? "%Qtid=%t %l: %*"
                                 : "%Y-%m-%dT%H:%M:%S.%eZ pid=%P tid=%t %l: %*");
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
