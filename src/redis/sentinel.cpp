#include "kiqd/redis/sentinel.hpp"

#include <charconv>
#include <stdexcept>

#include "kiqd/redis/connection.hpp"

namespace kiqd::redis {
namespace {

int parse_port(std::string_view text, const std::string& whole) {
    int port = 0;
    auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), port);
    if (ec != std::errc() || ptr != text.data() + text.size() || port < 1 || port > 65535)
        throw std::invalid_argument("invalid port in sentinel address '" + whole + "'");
    return port;
}

}  // namespace

std::string SentinelAddress::describe() const {
    if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
    return host + ":" + std::to_string(port);
}

std::string SentinelOptions::describe() const {
    std::string out =
        "master '" + master_name + "' via sentinel" + (sentinels.size() == 1 ? " " : "s ");
    for (size_t i = 0; i < sentinels.size(); ++i) {
        if (i) out += ",";
        out += sentinels[i].describe();
    }
    return out;
}

SentinelAddress parse_sentinel_address(const std::string& text) {
    SentinelAddress a;
    std::string_view rest(text);
    if (!rest.empty() && rest.front() == '[') {
        const auto close = rest.find(']');
        if (close == std::string_view::npos)
            throw std::invalid_argument("unclosed [ in sentinel address '" + text + "'");
        a.host = std::string(rest.substr(1, close - 1));
        rest.remove_prefix(close + 1);
        if (!rest.empty()) {
            if (rest.front() != ':')
                throw std::invalid_argument("invalid sentinel address '" + text + "'");
            a.port = parse_port(rest.substr(1), text);
        }
    } else if (const auto colon = rest.rfind(':'); colon != std::string_view::npos) {
        a.host = std::string(rest.substr(0, colon));
        a.port = parse_port(rest.substr(colon + 1), text);
    } else {
        a.host = text;
    }
    if (a.host.empty() || a.host.find_first_of(" \t/@") != std::string::npos)
        throw std::invalid_argument("invalid sentinel address '" + text + "' (expected host:port)");
    return a;
}

std::optional<MasterAddress> ask_sentinel(const SentinelOptions& options,
                                          const SentinelAddress& sentinel) {
    ConnectionOptions o;
    o.endpoint.host = sentinel.host;
    o.endpoint.port = sentinel.port;
    o.endpoint.username = options.username;
    o.endpoint.password = options.password;
    o.connect_timeout = options.timeout;
    o.socket_timeout = options.timeout;
    o.endpoint.tls = options.tls != nullptr;
    o.tls = options.tls;
    Connection c(std::move(o));  // a plain connection: o.sentinel is empty, so no recursion
    auto reply = c.command({"SENTINEL", "get-master-addr-by-name", options.master_name});
    if (reply.is_nil() || reply.size() < 2) return std::nullopt;
    MasterAddress m;
    m.host = std::string(reply[0].str());
    const auto port = reply[1].str();
    auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), m.port);
    if (ec != std::errc() || ptr != port.data() + port.size() || m.port < 1 || m.port > 65535)
        throw ProtocolError("sentinel " + sentinel.describe() + " sent an invalid port '" +
                            std::string(port) + "'");
    return m;
}

}  // namespace kiqd::redis
