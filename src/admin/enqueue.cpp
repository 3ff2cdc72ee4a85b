// `kiqd enqueue` (see enqueue.hpp): builds the job from the arguments and pushes it with the
// process client.
#include "admin/enqueue.hpp"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>

#include "admin/admin_connection.hpp"
#include "admin/escaped_output.hpp"
#include "admin/exit_codes.hpp"
#include "common/control_escape.hpp"
#include "kiqd/client.hpp"
#include "kiqd/clock.hpp"

namespace kiqd::admin {

std::optional<double> parse_enqueue_time(const std::string& text, double now) {
    if (text.empty()) return std::nullopt;
    auto number = [](const std::string& t, double& v) {
        if (t.empty() || !(std::isdigit(static_cast<unsigned char>(t[0])) || t[0] == '.'))
            return false;
        size_t used = 0;
        try {
            v = std::stod(t, &used);
        } catch (const std::exception&) {
            return false;
        }
        return used == t.size() && std::isfinite(v);
    };
    double v = 0;
    if (text[0] == '+') {  // relative: +30, +30s, +5m, +2h, +1d
        std::string n = text.substr(1);
        double unit = 1;
        if (!n.empty() && std::string("smhd").find(n.back()) != std::string::npos) {
            unit = n.back() == 's' ? 1 : n.back() == 'm' ? 60 : n.back() == 'h' ? 3600 : 86400;
            n.pop_back();
        }
        if (!number(n, v) || v * unit > 1e10) return std::nullopt;
        return now + v * unit;
    }
    if (number(text, v)) return v > 1e11 ? std::nullopt : std::optional<double>(v);
    // ISO 8601
    int y, mo, d, h, mi, sec, used = 0;
    if (std::sscanf(text.c_str(), "%4d-%2d-%2d%*1[T ]%2d:%2d:%2d%n", &y, &mo, &d, &h, &mi, &sec,
                    &used) != 6 ||
        used < 19)
        return std::nullopt;
    if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60) return std::nullopt;
    std::string rest = text.substr(static_cast<size_t>(used));
    double frac = 0;
    if (!rest.empty() && rest[0] == '.') {
        size_t n = 1;
        while (n < rest.size() && std::isdigit(static_cast<unsigned char>(rest[n]))) ++n;
        if (n == 1) return std::nullopt;
        frac = std::stod("0" + rest.substr(0, n));
        rest = rest.substr(n);
    }
    long offset = 0;
    if (rest == "Z" || rest.empty()) {
        offset = 0;
    } else if ((rest[0] == '+' || rest[0] == '-') && rest.size() == 6 && rest[3] == ':') {
        int oh = 0, om = 0;
        if (std::sscanf(rest.c_str() + 1, "%2d:%2d", &oh, &om) != 2 || oh > 23 || om > 59)
            return std::nullopt;
        offset = (rest[0] == '+' ? 1 : -1) * (oh * 3600L + om * 60L);
    } else {
        return std::nullopt;
    }
    std::tm tm{};
    tm.tm_year = y - 1900;
    tm.tm_mon = mo - 1;
    tm.tm_mday = d;
    tm.tm_hour = h;
    tm.tm_min = mi;
    tm.tm_sec = sec;
    return static_cast<double>(timegm(&tm) - offset) + frac;
}

int run_enqueue(const EnqueueRequest& r, const Config& config, std::ostream& raw_out,
                std::ostream& raw_err) {
    EscapedOutput out(raw_out), err(raw_err);
    nlohmann::ordered_json job{{"class", r.job_class}, {"args", nlohmann::ordered_json::array()}};
    if (r.job_class.empty()) {
        err << "kiqd enqueue: CLASS must not be empty" << std::endl;
        return kExitBadInput;
    }
    for (size_t i = 0; i < r.args_json.size(); ++i) {
        try {
            job["args"].push_back(nlohmann::ordered_json::parse(r.args_json[i]));
        } catch (const nlohmann::json::parse_error& e) {
            std::string what = e.what();
            if (auto p = what.find("parse error"); p != std::string::npos) what = what.substr(p);
            err << "kiqd enqueue: ARG_JSON " << i + 1 << " (" << escape_control(r.args_json[i])
                << ") is not valid JSON: " << escape_control(what)
                << " (a string needs JSON quotes, e.g. '\"text\"')" << std::endl;
            return kExitBadInput;
        }
    }
    if (r.queue) {
        if (r.queue->empty()) {
            err << "kiqd enqueue: --queue must not be empty" << std::endl;
            return kExitBadInput;
        }
        job["queue"] = *r.queue;
    }
    if (r.at) {
        auto when = parse_enqueue_time(*r.at, epoch_seconds());
        if (!when) {
            err << "kiqd enqueue: --at '" << escape_control(*r.at)
                << "' is not a time (epoch seconds, +N[s|m|h|d], or ISO 8601 like "
                   "2026-11-22T15:00:00Z)"
                << std::endl;
            return kExitBadInput;
        }
        job["at"] = *when;
    }
    if (r.tenant) job["fair_tenant"] = *r.tenant;
    const Client client = make_process_client(config);
    const redis::ConnectionOptions options = admin_connection_options(config, "enqueue");
    try {
        redis::Connection conn(options);
        conn.connect();
        const std::string jid = client.push(conn, std::move(job));
        if (jid.empty()) {
            err << "kiqd enqueue: a client middleware stopped the push" << std::endl;
            return kExitNotFound;
        }
        out << escape_control(jid) << std::endl;
        return 0;
    } catch (const std::invalid_argument& e) {
        err << "kiqd enqueue: " << escape_control(e.what()) << std::endl;
        return kExitBadInput;
    } catch (const redis::Error& e) {
        err << "kiqd enqueue: " << escape_control(describe_redis_error(e, options)) << std::endl;
        return kExitUnavailable;
    }
}

}  // namespace kiqd::admin
