// Hardening [hardening][terminal]: the admin command line prints what Redis holds — jids,
// classes, queues, error messages, process identities, tags, paused names — and Redis holds
// whatever any client wrote. A real Redis is filled with entries whose strings carry line
// breaks, ESC sequences (clear screen, set the window title), C1 controls, a bidi override and
// bytes that are not UTF-8; every admin command runs as the real kiqd binary, in text and in
// JSON (and `kiqd top`'s one-shot frame). Its output must hold no raw control byte (only the line
// breaks between lines), no C1 control, no bidi override, must be valid UTF-8, and must show the
// escapes instead.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "kiqd/keys.hpp"
#include "kiqd_cli.hpp"
#include "support/kiqd_process.hpp"
#include "support/redis_server.hpp"

using kiqd::test::kiqd_binary;
using kiqd::test::RedisServer;
using kiqd::test::run_command;

namespace {

const std::string kEsc = "\x1b[2J";             // clear the screen
const std::string kTitle = "\x1b]0;pwned\x07";  // set the window title
const std::string kCsi = "\xc2\x9b";            // U+009B, the one-character CSI
const std::string kBidi = "\xe2\x80\xae";       // U+202E RIGHT-TO-LEFT OVERRIDE

// What is wrong with `out` as terminal output, or "" when nothing is: a control byte other
// than the line break, DEL, a C1 control, a bidi override or a byte sequence that is not UTF-8.
std::string terminal_problem(const std::string& out) {
    for (size_t i = 0; i < out.size(); ++i) {
        const auto c = static_cast<unsigned char>(out[i]);
        if ((c < 0x20 && c != '\n') || c == 0x7f)
            return "raw control byte " + std::to_string(c) + " at " + std::to_string(i);
        if (c < 0x80) continue;
        size_t n = c >= 0xf0 && c <= 0xf4 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 && c < 0xe0 ? 2 : 0;
        if (n == 0 || i + n > out.size()) return "not UTF-8 at " + std::to_string(i);
        for (size_t k = 1; k < n; ++k)
            if ((static_cast<unsigned char>(out[i + k]) & 0xc0) != 0x80)
                return "not UTF-8 at " + std::to_string(i);
        if (c == 0xc2 && static_cast<unsigned char>(out[i + 1]) < 0xa0)
            return "C1 control at " + std::to_string(i);
        if (out.compare(i, 3, kBidi) == 0) return "bidi override at " + std::to_string(i);
        i += n - 1;
    }
    return "";
}

struct CommandResult {
    int status;
    std::string output;  // stdout and stderr
};

CommandResult run_admin(const RedisServer& redis, std::vector<std::string> args) {
    args.insert(args.begin(), kiqd_binary());
    auto [status, output] = run_command(args, {{"REDIS_URL", redis.url()}});
    return {status, output};
}

// Entries whose every string field tries something on the terminal.
void fill(kiqd::redis::Connection& c) {
    const kiqd::Keys keys("");
    const double now = static_cast<double>(std::time(nullptr));
    auto entry = [&](const std::string& jid) {
        return nlohmann::json{{"class", "Evil\nClass\r" + kEsc},
                              {"args", nlohmann::json::array()},
                              {"jid", jid},
                              {"queue", "q" + kTitle},
                              {"retry_count", 2},
                              {"error_class", "Err" + kCsi + "31m"},
                              {"error_message", "boom\r\nFAKE LINE" + kEsc + kBidi + "txet"},
                              {"failed_at", now}}
            .dump();
    };
    c.command({"ZADD", keys.retry(), std::to_string(now + 3600), entry("jid" + kEsc + "1")});
    c.command({"ZADD", keys.dead(), std::to_string(now - 60), entry("jid" + kEsc + "2")});
    // Queue names and process identities are Redis strings, not JSON: any bytes at all.
    for (const std::string queue : {"queue" + kEsc, std::string("bytes\xff\xfe\x9b")}) {
        c.command({"SADD", keys.queues(), queue});
        c.command(
            {"LPUSH", keys.queue(queue),
             R"({"class":"A","args":[],"jid":"x","enqueued_at":)" + std::to_string(now) + "}"});
    }
    const std::string identity = "host" + kEsc + ":1:\xff" + "abc";
    c.command({"SADD", keys.processes(), identity});
    c.command({"HSET", keys.process(identity), "info",
               nlohmann::json{{"hostname", "h" + kEsc},
                              {"pid", 1},
                              {"tag", "tag" + kCsi + kBidi},
                              {"queues", {"q\nq" + kTitle}},
                              {"labels", {"l" + kEsc}},
                              {"concurrency", 5},
                              {"started_at", now}}
                   .dump(),
               "busy", "0", "beat", std::to_string(now), "quiet", "false", "rss", "1024"});
    c.command({"ZADD", keys.schedule(), std::to_string(now + 60), entry("jid" + kEsc + "3")});
    c.command({"HSET", keys.work(identity, kiqd::Compat::v7), "tid" + kEsc,
               nlohmann::json{{"queue", "q" + kTitle},
                              {"payload", entry("jid" + kEsc + "4")},
                              {"run_at", static_cast<long long>(now)}}
                   .dump()});
    c.command({"SADD", keys.paused_queues(), "paused" + kEsc + "\n"});
    c.command({"SADD", keys.paused_workers(), "Paused" + kTitle});
    c.command({"HSET", keys.parked_classes(), "Parked\r" + kEsc + "\xff", "manual"});
}

}  // namespace

TEST_CASE("hardening: admin commands print stored strings escaped, never raw controls",
          "[hardening][terminal]") {
    RedisServer redis;
    auto c = redis.connect();
    fill(c);
    const std::string identity = "host" + kEsc + ":1:\xff" + "abc";
    // {arguments, a visible escape the output must show}
    const std::vector<std::pair<std::vector<std::string>, std::string>> runs{
        {{"stats"}, "processed"},
        {{"queues"}, "queue\\x1b[2J"},
        {{"queues", "--json"}, "queue\\u001b[2J"},
        {{"processes"}, "host\\x1b[2J:1:\\xffabc"},
        {{"processes", "--json"}, "tag\\u009b\\u202e"},
        {{"retries"}, "jid\\x1b[2J1"},
        {{"retries", "--json"}, "jid\\u001b[2J1"},
        {{"dead"}, "Evil\\nClass\\r\\x1b[2J"},
        {{"dead", "--json"}, "boom\\r\\nFAKE LINE\\u001b[2J\\u202etxet"},
        {{"paused"}, "paused\\x1b[2J\\n"},
        {{"paused", "--json"}, "Paused\\u001b]0;pwned\\u0007"},
        {{"busy"}, "tid\\x1b[2J"},
        {{"busy", "--json"}, "jid\\u001b[2J4"},
        {{"scheduled"}, "jid\\x1b[2J3"},
        {{"queue", "ls", "queue" + kEsc}, "Redis 127.0.0.1:"},
        {{"job", "jid" + kEsc + "1"}, "class        Evil\\nClass\\r\\x1b[2J"},
        {{"job", "jid" + kEsc + "4", "--json"}, "Evil\\nClass\\r\\u001b[2J"},
        {{"top"}, "host\\x1b[2J:1:\\xffabc"},
        {{"queue", "clear", "q" + kEsc + "x", "--yes"}, "cleared queue q\\x1b[2Jx"},
        // Strings the command echoes back: arguments, and what it found in Redis.
        {{"retries", "retry", "nope" + kEsc}, "nope\\x1b[2J"},
        {{"dead", "act" + kEsc}, "act\\x1b[2J"},
        {{"quiet", identity}, "sent TSTP to host\\x1b[2J:1:\\xffabc"},
        {{"stop", "--all"}, "sent TERM to host\\x1b[2J:1:\\xffabc"},
        {{"pause", "queue", "p" + kEsc + "\nX"}, "p\\x1b[2J\\nX"},
        {{"resume", "worker", "W" + kTitle}, "W\\x1b]0;pwned\\x07"},
        {{"enqueue", "C", "[1," + kEsc}, "[1,\\x1b[2J"},
        {{"enqueue", "C", "--at", "+1" + kEsc}, "+1\\x1b[2J"},
    };
    for (const auto& [args, visible] : runs) {
        const CommandResult r = run_admin(redis, args);
        INFO("kiqd " << nlohmann::json(args).dump(-1, ' ', true,
                                                  nlohmann::json::error_handler_t::replace)
                     << " → exit " << r.status << ":\n"
                     << r.output);
        CHECK(r.status < 128);  // no crash
        CHECK(terminal_problem(r.output) == "");
        CHECK(r.output.find(visible) != std::string::npos);
    }
}

TEST_CASE("hardening: admin --json output parses even with bytes that are not UTF-8 in Redis",
          "[hardening][terminal]") {
    RedisServer redis;
    auto c = redis.connect();
    fill(c);
    for (const std::string command : {"queues", "processes", "paused"}) {
        const CommandResult r = run_admin(redis, {command, "--json"});
        INFO(command << " → exit " << r.status << ":\n" << r.output);
        REQUIRE(r.status == 0);
        nlohmann::json parsed;
        REQUIRE_NOTHROW(parsed = nlohmann::json::parse(r.output));
        CHECK(parsed.dump().find("\xef\xbf\xbd") != std::string::npos);  // U+FFFD for 0xff
    }
}
