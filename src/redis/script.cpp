#include "kiqd/redis/script.hpp"

#include <unordered_map>

namespace kiqd::redis {
namespace {

// Every script this process has loaded, by SHA1: what resend_noscript sends instead.
struct Sources {
    std::mutex mutex;
    std::unordered_map<std::string, std::string> by_sha;
};
Sources& sources() {
    static Sources s;
    return s;
}

}  // namespace

void resend_noscript(Connection& conn, const std::vector<Command>& sent,
                     const std::vector<Reply>& replies, size_t begin, size_t end) {
    std::vector<Command> again;
    for (size_t i = begin; i < end && i < replies.size() && i < sent.size(); ++i) {
        if (!replies[i].is_error() || replies[i].error_text().rfind("NOSCRIPT", 0) != 0) continue;
        if (sent[i].size() < 3 || sent[i][0] != "EVALSHA") continue;
        Command eval = sent[i];
        eval[0] = "EVAL";
        {
            std::lock_guard lock(sources().mutex);
            auto it = sources().by_sha.find(sent[i][1]);
            if (it == sources().by_sha.end()) continue;
            eval[1] = it->second;
        }
        again.push_back(std::move(eval));
    }
    if (!again.empty()) conn.pipeline_unchecked(again);
}

Command Script::deferred_command(Connection& conn, std::vector<std::string> keys,
                                 std::vector<std::string> args) const {
    if (sha().empty()) {
        try {
            load(conn);
        } catch (const Error&) {
            // Never throws (callers run it while a job's failure is on its way): the source
            // then goes itself, as with EVAL.
            Command eval = evalsha_command(std::move(keys), std::move(args));
            eval[0] = "EVAL";
            eval[1] = source_;
            return eval;
        }
    }
    return evalsha_command(std::move(keys), std::move(args));
}

std::string Script::load(Connection& conn) const {
    auto reply = conn.command({"SCRIPT", "LOAD", source_});
    std::string sha(reply.str());
    {
        std::lock_guard lock(sources().mutex);
        sources().by_sha.emplace(sha, source_);
    }
    std::lock_guard lock(mutex_);
    sha_ = sha;
    return sha_;
}

std::vector<Reply> Script::pipeline_unchecked(Connection& conn, std::vector<Command> calls) const {
    std::string current = sha();
    if (current.empty()) current = load(conn);
    for (auto& c : calls) c[1] = current;  // built before the first load, or before a reload
    auto replies = conn.pipeline_unchecked(calls);
    std::vector<size_t> missing;
    for (size_t i = 0; i < replies.size(); ++i)
        if (replies[i].is_error() && replies[i].error_text().rfind("NOSCRIPT", 0) == 0)
            missing.push_back(i);
    if (missing.empty()) return replies;
    current = load(conn);
    std::vector<Command> again;
    for (size_t i : missing) {
        again.push_back(std::move(calls[i]));
        again.back()[1] = current;
    }
    auto retried = conn.pipeline_unchecked(again);
    for (size_t k = 0; k < missing.size(); ++k) replies[missing[k]] = std::move(retried[k]);
    return replies;
}

std::string Script::sha() const {
    std::lock_guard lock(mutex_);
    return sha_;
}

Command Script::evalsha_command(const std::vector<std::string>& keys,
                                const std::vector<std::string>& args) const {
    Command cmd;
    cmd.reserve(3 + keys.size() + args.size());
    cmd.push_back("EVALSHA");
    cmd.push_back(sha());
    cmd.push_back(std::to_string(keys.size()));
    cmd.insert(cmd.end(), keys.begin(), keys.end());
    cmd.insert(cmd.end(), args.begin(), args.end());
    return cmd;
}

Command Script::evalsha_command(std::vector<std::string>&& keys,
                                std::vector<std::string>&& args) const {
    Command cmd;
    cmd.reserve(3 + keys.size() + args.size());
    cmd.push_back("EVALSHA");
    cmd.push_back(sha());
    cmd.push_back(std::to_string(keys.size()));
    for (auto& k : keys) cmd.push_back(std::move(k));
    for (auto& a : args) cmd.push_back(std::move(a));
    return cmd;
}

Reply Script::run_after(Connection& conn, std::vector<Command>* pending,
                        const std::vector<std::string>& keys,
                        const std::vector<std::string>& args) const {
    if (!pending || pending->empty()) return run(conn, keys, args);
    if (sha().empty()) load(conn);
    pending->push_back(evalsha_command(keys, args));
    std::vector<Reply> replies;
    try {
        replies = conn.pipeline_unchecked(*pending);
    } catch (...) {
        pending->pop_back();  // the leftovers are tried again with the next write
        throw;
    }
    resend_noscript(conn, *pending, replies, 0, pending->size() - 1);
    pending->clear();
    Reply reply = std::move(replies.back());
    if (!reply.is_error()) return reply;
    if (reply.error_text().rfind("NOSCRIPT", 0) != 0)
        throw ReplyError(std::string(reply.error_text()));
    load(conn);
    return conn.command(evalsha_command(keys, args));
}

Reply Script::run(Connection& conn, const std::vector<std::string>& keys,
                  const std::vector<std::string>& args) const {
    if (sha().empty()) load(conn);
    try {
        return conn.command(evalsha_command(keys, args));
    } catch (const ReplyError& e) {
        if (!e.starts_with("NOSCRIPT")) throw;
        load(conn);
        return conn.command(evalsha_command(keys, args));
    }
}

Reply Script::run_views(Connection& conn, const std::vector<std::string_view>& keys,
                        const std::vector<std::string_view>& args) const {
    std::string current = sha();
    if (current.empty()) current = load(conn);
    const std::string count = std::to_string(keys.size());
    std::vector<std::string_view> argv;
    argv.reserve(3 + keys.size() + args.size());
    auto send = [&] {
        argv.assign({"EVALSHA", current, count});
        argv.insert(argv.end(), keys.begin(), keys.end());
        argv.insert(argv.end(), args.begin(), args.end());
        return conn.command(argv);
    };
    try {
        return send();
    } catch (const ReplyError& e) {
        if (!e.starts_with("NOSCRIPT")) throw;
        current = load(conn);
        return send();
    }
}

}  // namespace kiqd::redis
