#include "kiqd/redis/script.hpp"

namespace kiqd::redis {

std::string Script::load(Connection& conn) const {
    auto reply = conn.command({"SCRIPT", "LOAD", source_});
    std::lock_guard lock(mutex_);
    sha_ = std::string(reply.str());
    return sha_;
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
