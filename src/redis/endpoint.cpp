#include "kiqd/redis/endpoint.hpp"

#include <charconv>
#include <stdexcept>

namespace kiqd::redis {
namespace {

int parse_int(std::string_view text, const char* what) {
    int value = 0;
    auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || ptr != text.data() + text.size() || value < 0)
        throw std::invalid_argument(std::string("invalid ") + what + " '" + std::string(text) +
                                    "' in Redis URL");
    return value;
}

std::string percent_decode(std::string_view in) {
    std::string out;
    for (size_t i = 0; i < in.size(); ++i) {
        if (in[i] == '%' && i + 2 < in.size()) {
            int v = 0;
            auto [p, ec] = std::from_chars(in.data() + i + 1, in.data() + i + 3, v, 16);
            if (ec == std::errc() && p == in.data() + i + 3) {
                out.push_back(static_cast<char>(v));
                i += 2;
                continue;
            }
        }
        out.push_back(in[i]);
    }
    return out;
}

}  // namespace

std::string Endpoint::describe() const {
    if (!unix_path.empty()) return "unix:" + unix_path + "/" + std::to_string(db);
    return host + ":" + std::to_string(port) + "/" + std::to_string(db);
}

Endpoint parse_redis_url(const std::string& url) {
    Endpoint ep;
    std::string_view rest(url);
    if (rest.rfind("unix://", 0) == 0) {
        rest.remove_prefix(7);
        auto q = rest.find('?');
        ep.unix_path = std::string(rest.substr(0, q));
        if (q != std::string_view::npos) {
            auto query = rest.substr(q + 1);
            if (query.rfind("db=", 0) != 0)
                throw std::invalid_argument("unsupported query in Redis URL (only db=N)");
            ep.db = parse_int(query.substr(3), "database");
        }
        if (ep.unix_path.empty()) throw std::invalid_argument("empty socket path in Redis URL");
        return ep;
    }
    if (rest.rfind("rediss://", 0) == 0) {
        ep.tls = true;
        rest.remove_prefix(9);
    } else if (rest.rfind("redis://", 0) == 0) {
        rest.remove_prefix(8);
    } else {
        throw std::invalid_argument("Redis URL must start with redis://, rediss:// or unix://");
    }
    if (auto at = rest.rfind('@'); at != std::string_view::npos) {
        auto userinfo = rest.substr(0, at);
        rest.remove_prefix(at + 1);
        if (auto colon = userinfo.find(':'); colon != std::string_view::npos) {
            ep.username = percent_decode(userinfo.substr(0, colon));
            ep.password = percent_decode(userinfo.substr(colon + 1));
        } else {
            ep.password = percent_decode(userinfo);  // redis://secret@host, as redis-rb reads it
        }
    }
    if (auto slash = rest.find('/'); slash != std::string_view::npos) {
        auto db = rest.substr(slash + 1);
        if (!db.empty()) ep.db = parse_int(db, "database");
        rest = rest.substr(0, slash);
    }
    if (!rest.empty() && rest.front() == '[') {  // [::1]:6379
        auto close = rest.find(']');
        if (close == std::string_view::npos) throw std::invalid_argument("unclosed [ in Redis URL");
        ep.host = std::string(rest.substr(1, close - 1));
        rest.remove_prefix(close + 1);
        if (!rest.empty() && rest.front() == ':') ep.port = parse_int(rest.substr(1), "port");
    } else if (auto colon = rest.rfind(':'); colon != std::string_view::npos) {
        ep.host = std::string(rest.substr(0, colon));
        ep.port = parse_int(rest.substr(colon + 1), "port");
    } else if (!rest.empty()) {
        ep.host = std::string(rest);
    }
    if (ep.host.empty()) ep.host = "127.0.0.1";
    if (ep.port <= 0 || ep.port > 65535)
        throw std::invalid_argument("port out of range in Redis URL");
    return ep;
}

}  // namespace kiqd::redis
