#include "kiqd/redis/script.hpp"

namespace kiqd::redis {

std::string Script::load(Connection& conn) const {
    auto reply = conn.command({"SCRIPT", "LOAD", source_});
    std::lock_guard lock(mutex_);
    sha_ = std::string(reply.str());
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

}  // namespace kiqd::redis
