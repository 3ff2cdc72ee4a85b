// kiqd_test_daemon: the stock daemon plus handlers that leave evidence in Redis, for tests that
// need to know exactly which jobs ran, where and when. Built with the public API (kiqd::run).
//   Test::Record — RPUSH kiqd-test:ran {"jid","class","queue","args","retry_count","pid",
//                  "enqueued_at","started","ended"}; args[0] may be a number of seconds to
//                  sleep first.
//   Test::Other — the same as Test::Record under another class name.
//   Test::RecordOther — the same, under another class name (e.g. one without metadata).
//   Test::FailOnce — fails on its first attempt (no retry_count yet), then records like Record.
//   Test::Gated::<lock type> (UntilAndWhileExecuting, UntilExecuting, UntilExecuted,
//                 WhileExecuting, UntilAndWhileExecutingReschedule) — args [key, gate, mode]: RPUSH
//                 kiqd-test:started <jid>, waits until the key kiqd-test:gate:<gate> exists, then
//                 fails (Test::FirstAttempt) when mode is "fail" and the payload has no retry_count
//                 yet, else RPUSH kiqd-test:done <jid>. The same as the Ruby workers of
//                 tests/interop/unique_gems/app.rb, so kiqd and the gem's Ruby server run the
//                 same jobs.
//   Test::Spawn — args[0] is a list of job hashes: enqueues each through the process client
//                 (JobContext::enqueue, with its client middleware), RPUSHes the list of
//                 returned jids to kiqd-test:spawned, then records like Record.
//   Test::Ledger — like Record, but appends its line to the file named by KIQD_TEST_LEDGER (one
//                 write, O_APPEND) instead of Redis, so that it records while Redis refuses
//                 writes: {"jid","pid","started","ended"}.
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "kiqd/clock.hpp"
#include "kiqd/kiqd.hpp"
#include "middleware/metadata_middleware.hpp"

namespace {

void record(const kiqd::Job& job, kiqd::JobContext& ctx, double started) {
    nlohmann::json entry{
        {"jid", job.jid},
        {"class", job.handler_name()},
        {"queue", job.queue},
        {"args", job.args()},
        {"retry_count", job.retry_count() ? *job.retry_count() : -1},
        {"pid", static_cast<int>(getpid())},
        {"enqueued_at", job.enqueued_at() ? nlohmann::json(*job.enqueued_at()) : nlohmann::json()},
        {"started", started},
        {"ended", kiqd::epoch_seconds()}};
    ctx.redis.command({"RPUSH", "kiqd-test:ran", entry.dump()});
}

void record_handler(const kiqd::Job& job, kiqd::JobContext& ctx) {
    const double started = kiqd::epoch_seconds();
    const auto& args = job.args();
    if (!args.empty() && args[0].is_number() && args[0].get<double>() > 0) {
        if (ctx.stop.wait_for(std::chrono::duration<double>(args[0].get<double>())))
            throw kiqd::Interrupted();
    }
    record(job, ctx, started);
}

void ledger_handler(const kiqd::Job& job, kiqd::JobContext& ctx) {
    const double started = kiqd::epoch_seconds();
    const auto& args = job.args();
    if (!args.empty() && args[0].is_number() && args[0].get<double>() > 0) {
        if (ctx.stop.wait_for(std::chrono::duration<double>(args[0].get<double>())))
            throw kiqd::Interrupted();
    }
    const char* path = std::getenv("KIQD_TEST_LEDGER");
    if (!path) throw kiqd::JobError("Test::NoLedger", "KIQD_TEST_LEDGER is not set");
    const std::string line = nlohmann::json{{"jid", job.jid},
                                            {"pid", static_cast<int>(getpid())},
                                            {"started", started},
                                            {"ended", kiqd::epoch_seconds()}}
                                 .dump() +
                             "\n";
    const int fd = ::open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) throw kiqd::JobError("Test::NoLedger", std::string("cannot open ") + path);
    const ssize_t n = ::write(fd, line.data(), line.size());
    ::close(fd);
    if (n != static_cast<ssize_t>(line.size()))
        throw kiqd::JobError("Test::NoLedger", "short write to the ledger");
}

void gated_handler(const kiqd::Job& job, kiqd::JobContext& ctx) {
    const auto& args = job.args();
    const std::string gate =
        args.size() > 1 && args[1].is_string() ? args[1].get<std::string>() : "";
    const bool fail = args.size() > 2 && args[2] == "fail";
    ctx.redis.command({"RPUSH", "kiqd-test:started", job.jid});
    while (ctx.redis.command({"EXISTS", "kiqd-test:gate:" + gate}).integer() == 0) {
        if (ctx.stop.wait_for(std::chrono::milliseconds(20))) throw kiqd::Interrupted();
    }
    if (fail && !job.retry_count())
        throw kiqd::JobError("Test::FirstAttempt", "first attempt fails");
    ctx.redis.command({"RPUSH", "kiqd-test:done", job.jid});
}

}  // namespace

int main(int argc, char** argv) {
    kiqd::HandlerRegistry handlers;
    handlers.add("Test::Record", record_handler);
    handlers.add("Test::Ledger", ledger_handler);
    handlers.add("Test::Other", record_handler);        // a second class that records the same way
    handlers.add("Test::RecordOther", record_handler);  // a second class, for metadata tests
    for (const char* type : {"UntilAndWhileExecuting", "UntilExecuting", "UntilExecuted",
                             "WhileExecuting", "UntilAndWhileExecutingReschedule"})
        handlers.add(std::string("Test::Gated::") + type, gated_handler);
    handlers.add("Test::FailOnce", [](const kiqd::Job& job, kiqd::JobContext& ctx) {
        if (!job.retry_count()) throw kiqd::JobError("Test::FirstAttempt", "first attempt fails");
        record(job, ctx, kiqd::epoch_seconds());
    });
    // Burns args[0] seconds of this thread's CPU time, then records (for the CPU-time metric).
    handlers.add("Test::Burn", [](const kiqd::Job& job, kiqd::JobContext& ctx) {
        const double started = kiqd::epoch_seconds();
        const double until = kiqd::thread_cpu_seconds() + job.args().at(0).get<double>();
        volatile unsigned long spin = 0;
        while (kiqd::thread_cpu_seconds() < until) spin = spin + 1;
        record(job, ctx, started);
    });
    handlers.add("Test::Spawn", [](const kiqd::Job& job, kiqd::JobContext& ctx) {
        const double started = kiqd::epoch_seconds();
        nlohmann::json jids = nlohmann::json::array();
        const auto& args = job.args();
        if (!args.empty() && args[0].is_array())
            for (const auto& j : args[0]) jids.push_back(ctx.enqueue(nlohmann::ordered_json(j)));
        ctx.redis.command({"RPUSH", "kiqd-test:spawned", jids.dump()});
        record(job, ctx, started);
    });
    kiqd::MiddlewareRegistry middleware;
    return kiqd::run(argc, argv, handlers, middleware);
}
