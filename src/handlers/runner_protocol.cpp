#include "handlers/runner_protocol.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

namespace kiqd::runner {

std::string encode_frame(std::string_view type, std::string_view data, uint32_t tag) {
    const std::string tag_text = tag ? " " + std::to_string(tag) : std::string();
    const size_t body = type.size() + tag_text.size() + 1 + data.size();
    std::string out;
    out.reserve(4 + body);
    for (int shift = 24; shift >= 0; shift -= 8)
        out.push_back(static_cast<char>((body >> shift) & 0xFF));
    out.append(type);
    out.append(tag_text);
    out.push_back('\n');
    out.append(data);
    return out;
}

std::optional<Frame> FrameReader::next() {
    if (!error_.empty() || buf_.size() - pos_ < 4) return std::nullopt;
    const auto* p = reinterpret_cast<const unsigned char*>(buf_.data() + pos_);
    const size_t len = (size_t{p[0]} << 24) | (size_t{p[1]} << 16) | (size_t{p[2]} << 8) | p[3];
    if (len > kMaxFrameBytes) {
        error_ = fmt::format("a frame of {} bytes (the limit is {})", len, kMaxFrameBytes);
        return std::nullopt;
    }
    if (buf_.size() - pos_ - 4 < len) return std::nullopt;
    std::string_view body(buf_.data() + pos_ + 4, len);
    const auto nl = body.find('\n');
    if (nl == std::string_view::npos || nl == 0 || nl > 32) {
        error_ = "a frame without a type line";
        return std::nullopt;
    }
    std::string_view type = body.substr(0, nl);
    uint32_t tag = 0;
    if (const auto sp = type.find(' '); sp != std::string_view::npos) {
        // "TYPE TAG": a decimal tag from 1 to 2^32-1, nothing else.
        const std::string_view digits = type.substr(sp + 1);
        unsigned long long value = 0;
        bool ok = !digits.empty() && digits.size() <= 10 && digits[0] != '0';
        for (char ch : digits) {
            ok = ok && ch >= '0' && ch <= '9';
            value = value * 10 + static_cast<unsigned>(ch - '0');
        }
        if (!ok || value == 0 || value > 0xFFFFFFFFull) {
            error_ = "a frame whose tag is not a number from 1 to 4294967295";
            return std::nullopt;
        }
        tag = static_cast<uint32_t>(value);
        type = type.substr(0, sp);
    }
    Frame f{std::string(type), std::string(body.substr(nl + 1)), tag};
    pos_ += 4 + len;
    // Compact once the consumed prefix dominates, so a long-lived reader does not grow.
    if (pos_ > 65536 && pos_ * 2 > buf_.size()) {
        buf_.erase(0, pos_);
        pos_ = 0;
    }
    return f;
}

namespace {

std::optional<nlohmann::json> object_of(const Frame& frame, std::string& error) {
    auto j = nlohmann::json::parse(frame.data, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
        error = "the " + frame.type + " frame's data is not a JSON object";
        return std::nullopt;
    }
    return j;
}

}  // namespace

std::optional<Reply> parse_reply(const Frame& frame, std::string& error) {
    if (frame.type != "done" && frame.type != "fail" && frame.type != "throttled") {
        error = "an unexpected '" + frame.type.substr(0, 32) +
                "' frame instead of done, fail or throttled";
        return std::nullopt;
    }
    Reply r;
    if (frame.type == "done") {
        r.ok = true;
        return r;
    }
    if (frame.type == "throttled") {
        auto j = object_of(frame, error);
        if (!j) return std::nullopt;
        r.ok = true;
        r.throttled = true;
        // A rest outside (0, 1 hour] is not one: the queue is fetched from as usual.
        if (auto rest = j->find("rest"); rest != j->end() && rest->is_number()) {
            const double s = rest->get<double>();
            if (s > 0 && s <= 3600) r.rest_seconds = s;
        }
        return r;
    }
    auto j = object_of(frame, error);
    if (!j) return std::nullopt;
    auto cls = j->find("class");
    auto msg = j->find("message");
    if (cls == j->end() || !cls->is_string() || cls->get<std::string>().empty()) {
        error = "a fail frame without a string \"class\"";
        return std::nullopt;
    }
    r.error_class = cls->get<std::string>();
    if (msg != j->end() && msg->is_string()) r.message = msg->get<std::string>();
    if (auto bt = j->find("backtrace"); bt != j->end() && bt->is_array()) {
        for (const auto& line : *bt)
            r.backtrace.push_back(line.is_string() ? line.get<std::string>() : line.dump());
    }
    if (auto ri = j->find("retry_in"); ri != j->end() && ri->is_number()) {
        const double s = ri->get<double>();
        if (s >= 1 && s < 366.0 * 24 * 3600) r.retry_in = static_cast<long long>(s);
    } else if (ri != j->end() && ri->is_string()) {
        // Sidekiq 7's sidekiq_retry_in may answer :kill or :discard; anything else: the default.
        const auto& word = ri->get_ref<const std::string&>();
        if (word == "kill") r.give_up = GiveUp::kill;
        if (word == "discard") r.give_up = GiveUp::discard;
    }
    // A runner that ran Sidekiq's own retry decision (docs/runner-protocol.md#retry-decisions).
    if (auto d = j->find("decision"); d != j->end()) {
        const std::string word = d->is_string() ? d->get<std::string>() : "";
        if (word == "retry")
            r.decision = Decision::retry;
        else if (word == "dead")
            r.decision = Decision::dead;
        else if (word == "discard")
            r.decision = Decision::discard;
        else {
            error = "a fail frame whose \"decision\" is not retry, dead or discard";
            return std::nullopt;
        }
        if (r.decision == Decision::retry) {
            auto at = j->find("retry_at");
            if (at == j->end() || !at->is_number() || !(at->get<double>() > 0)) {
                error = "a retry decision without a positive \"retry_at\"";
                return std::nullopt;
            }
            r.retry_at = at->get<double>();
        }
        r.give_up = GiveUp::no;  // the decision says it all
        r.retry_in.reset();
    }
    return r;
}

namespace {

using nlohmann::json;

// Names and texts the app reports are bounded: a class name longer than this is not a Ruby
// constant anyone enqueues, and the lists stay small enough to log and compare.
constexpr size_t kMaxName = 256;
constexpr size_t kMaxEntries = 20000;

std::optional<std::string> short_text(const json& j, const char* key) {
    auto v = j.find(key);
    if (v == j.end() || !v->is_string()) return std::nullopt;
    auto text = v->get<std::string>();
    if (text.empty() || text.size() > kMaxName) return std::nullopt;
    return text;
}

// "capsules": [{"name": "single", "concurrency": 1, "queues": [["single", 0]]}]. An entry that
// is not of that shape is left out (kiqd then warns that it did not apply it: app_settings.cpp).
std::vector<AppCapsule> app_capsules(const json& app) {
    std::vector<AppCapsule> out;
    auto list = app.find("capsules");
    if (list == app.end() || !list->is_array()) return out;
    for (const auto& c : *list) {
        if (!c.is_object() || out.size() >= kMaxEntries) continue;
        AppCapsule cap;
        auto name = short_text(c, "name");
        auto conc = c.find("concurrency");
        auto queues = c.find("queues");
        if (!name || conc == c.end() || !conc->is_number_integer() || queues == c.end() ||
            !queues->is_array())
            continue;
        cap.name = *name;
        cap.concurrency = conc->get<long long>();
        bool ok = true;
        for (const auto& q : *queues) {
            if (!q.is_array() || q.size() != 2 || !q[0].is_string() || !q[1].is_number_integer() ||
                q[0].get<std::string>().empty() || q[0].get<std::string>().size() > kMaxName) {
                ok = false;
                break;
            }
            cap.queues.emplace_back(q[0].get<std::string>(), q[1].get<long long>());
        }
        if (ok) out.push_back(std::move(cap));
    }
    return out;
}

// "classes": [{"class": "HardJob", "queue": "critical", "urgency": "high", "tags": [...]}].
std::vector<AppWorkerClass> app_classes(const json& app) {
    std::vector<AppWorkerClass> out;
    auto list = app.find("classes");
    if (list == app.end() || !list->is_array()) return out;
    for (const auto& c : *list) {
        if (!c.is_object() || out.size() >= kMaxEntries) continue;
        auto name = short_text(c, "class");
        if (!name) continue;
        AppWorkerClass cls;
        cls.name = *name;
        cls.queue = short_text(c, "queue").value_or("");
        for (const char* key : {"urgency", "resource_boundary", "feature_category"})
            if (auto v = short_text(c, key)) cls.attributes[key] = *v;
        const auto flag = [&](const char* key) -> std::optional<bool> {
            auto v = c.find(key);
            if (v == c.end() || !v->is_boolean()) return std::nullopt;
            return v->get<bool>();
        };
        cls.idempotent = flag("idempotent");
        cls.external_dependencies = flag("external_dependencies");
        if (auto tags = c.find("tags"); tags != c.end() && tags->is_array()) {
            std::vector<std::string> t;
            for (const auto& tag : *tags)
                if (tag.is_string() && !tag.get<std::string>().empty() &&
                    tag.get<std::string>().size() <= kMaxName && t.size() < 64)
                    t.push_back(tag.get<std::string>());
            cls.tags = std::move(t);
        }
        out.push_back(std::move(cls));
    }
    return out;
}

// "fetch_patches": [{"target": "Sidekiq::Manager", "module": "…", "gem": "…", "honoured": false}]
std::vector<AppFetchPatch> app_fetch_patches(const json& app) {
    std::vector<AppFetchPatch> out;
    auto list = app.find("fetch_patches");
    if (list == app.end() || !list->is_array()) return out;
    for (const auto& p : *list) {
        if (!p.is_object() || out.size() >= 64) continue;
        auto target = short_text(p, "target");
        auto module = short_text(p, "module");
        if (!target || !module) continue;
        auto honoured = p.find("honoured");
        out.push_back({*target, *module, short_text(p, "gem").value_or(""),
                       honoured != p.end() && honoured->is_boolean() && honoured->get<bool>()});
    }
    return out;
}

}  // namespace

std::optional<Ready> parse_ready(const Frame& frame, std::string& error) {
    if (frame.type != "ready") {
        error = "an unexpected '" + frame.type.substr(0, 32) + "' frame instead of ready";
        return std::nullopt;
    }
    auto j = object_of(frame, error);
    if (!j) return std::nullopt;
    Ready r;
    if (auto pid = j->find("pid"); pid != j->end() && pid->is_number_integer())
        r.pid = pid->get<long long>();
    if (auto name = j->find("runner"); name != j->end() && name->is_string())
        r.runner = name->get<std::string>().substr(0, 200);
    if (auto preload = j->find("preload"); preload != j->end() && preload->is_boolean())
        r.preload = preload->get<bool>();
    if (auto threads = j->find("threads"); threads != j->end()) {
        if (!threads->is_number_integer() || threads->get<long long>() < 1 ||
            threads->get<long long>() > 1024) {
            error = "a ready frame whose \"threads\" is not a whole number from 1 to 1024";
            return std::nullopt;
        }
        r.threads = static_cast<int>(threads->get<long long>());
    }
    if (auto seats = j->find("seats"); seats != j->end() && seats->is_boolean())
        r.seat_sockets = seats->get<bool>() && r.threads > 0;
    // The app's own settings: a value that is not a whole number in range is left out.
    if (auto app = j->find("app"); app != j->end() && app->is_object()) {
        const auto whole = [&](const char* key, long long min) -> std::optional<long long> {
            auto v = app->find(key);
            if (v == app->end() || !v->is_number_integer() || v->get<long long>() < min ||
                v->get<long long>() > (1LL << 40))
                return std::nullopt;
            return v->get<long long>();
        };
        r.app.max_retries = whole("max_retries", 0);
        r.app.dead_max_jobs = whole("dead_max_jobs", 1);
        r.app.dead_timeout_seconds = whole("dead_timeout_in_seconds", 1);
        r.app.capsules = app_capsules(*app);
        r.app.classes = app_classes(*app);
        r.app.fetch_patches = app_fetch_patches(*app);
    }
    return r;
}

}  // namespace kiqd::runner
