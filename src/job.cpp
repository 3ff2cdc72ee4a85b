#include "kiqd/job.hpp"

#include "kiqd/clock.hpp"
#include "kiqd/raw_json_object.hpp"

namespace kiqd {
namespace {

const nlohmann::json& empty_array() {
    static const nlohmann::json kEmpty = nlohmann::json::array();
    return kEmpty;
}

}  // namespace

const nlohmann::json& Job::args() const {
    auto it = payload.find("args");
    return it != payload.end() && it->is_array() ? *it : empty_array();
}

const nlohmann::json* Job::active_job_arguments() const {
    const auto& a = args();
    if (wrapped.empty() || a.empty() || !a[0].is_object()) return nullptr;
    auto it = a[0].find("arguments");
    return it != a[0].end() && it->is_array() ? &*it : nullptr;
}

std::optional<long long> Job::retry_count() const {
    auto it = payload.find("retry_count");
    if (it == payload.end() || !it->is_number_integer()) return std::nullopt;
    return it->get<long long>();
}

const std::string& Job::display_class() const {
    auto it = payload.find("display_class");
    if (it != payload.end() && it->is_string()) return it->get_ref<const std::string&>();
    return handler_name();
}

std::optional<double> Job::enqueued_at() const {
    auto it = payload.find("enqueued_at");
    if (it == payload.end() || !it->is_number()) return std::nullopt;
    return timestamp_seconds(it->get<double>(), it->is_number_integer());
}

std::variant<Job, InvalidJob> parse_job(std::string raw, std::string queue,
                                        const JobLimits& limits) {
    if (raw.size() > limits.max_payload_bytes)
        return InvalidJob{"Kiqd::PayloadTooLarge",
                          "payload of " + std::to_string(raw.size()) + " bytes exceeds the " +
                              std::to_string(limits.max_payload_bytes) + "-byte limit"};
    if (json_nesting_depth(raw) > limits.max_nesting_depth)
        return InvalidJob{
            "Kiqd::InvalidJob",
            "payload nests deeper than " + std::to_string(limits.max_nesting_depth) + " levels"};
    Job job;
    try {
        job.payload = nlohmann::json::parse(raw);
    } catch (const nlohmann::json::exception& e) {
        return InvalidJob{"JSON::ParserError", e.what()};
    }
    if (!job.payload.is_object())
        return InvalidJob{"Kiqd::InvalidJob", "payload is not a JSON object"};
    auto str_field = [&](const char* name, std::string& out, bool required) -> std::string {
        auto it = job.payload.find(name);
        if (it == job.payload.end()) return required ? std::string("missing \"") + name + "\"" : "";
        if (!it->is_string()) return std::string("\"") + name + "\" is not a string";
        out = it->get<std::string>();
        return "";
    };
    for (auto [name, out, required] :
         {std::tuple<const char*, std::string*, bool>{"class", &job.job_class, true},
          {"wrapped", &job.wrapped, false},
          {"jid", &job.jid, false}}) {
        if (auto err = str_field(name, *out, required); !err.empty())
            return InvalidJob{"Kiqd::InvalidJob", err};
    }
    if (job.job_class.empty()) return InvalidJob{"Kiqd::InvalidJob", "\"class\" is empty"};
    if (auto it = job.payload.find("args"); it != job.payload.end() && !it->is_array())
        return InvalidJob{"Kiqd::InvalidJob", "\"args\" is not an array"};
    job.raw = std::move(raw);
    job.queue = std::move(queue);
    return job;
}

}  // namespace kiqd
