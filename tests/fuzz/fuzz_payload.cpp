// Fuzz target: everything a fetched payload goes through before and around a handler.
// parse_job must return a Job or an InvalidJob with a non-empty reason; an InvalidJob must turn
// into a dead-set entry that is a valid JSON object carrying that reason; a Job must survive its
// accessors, a retry plan (RawJsonObject edits) and a dead entry, each still valid JSON with the
// original fields intact. Anything else — a crash, a sanitizer report, an exception — is a bug.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>

#include "job/dead_set.hpp"
#include "job/job_retry.hpp"
#include "job/raw_json_object.hpp"
#include "kiqd/job.hpp"
#include "kiqd/keys.hpp"

namespace {

[[noreturn]] void contract_broken(const char* what) {
    std::fprintf(stderr, "fuzz_payload: contract broken: %s\n", what);
    std::abort();
}

void require(bool ok, const char* what) {
    if (!ok) contract_broken(what);
}

// Parses text that kiqd is about to write to Redis: it must be a JSON object.
nlohmann::json parse_object(const std::string& text, const char* what) {
    nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    require(j.is_object(), what);
    return j;
}

void check_invalid(const std::string& raw, const kiqd::InvalidJob& why, const kiqd::DeadSet& dead) {
    require(!why.error_class.empty(), "InvalidJob without error_class");
    require(!why.error_message.empty(), "InvalidJob without error_message");
    auto entry = parse_object(dead.invalid_entry(raw, "default", why), "invalid dead entry");
    require(entry.value("error_class", "") == why.error_class, "dead entry lost error_class");
    require(entry.contains("error_message") && entry["error_message"].is_string(),
            "dead entry without error_message");
    require(entry.contains("jid") && entry.contains("failed_at"), "dead entry without jid");
}

void check_job(const kiqd::Job& job, const kiqd::JobRetry& retry, const kiqd::DeadSet& dead) {
    require(!job.job_class.empty(), "Job with an empty class");
    require(!job.handler_name().empty(), "Job with an empty handler name");
    (void)job.args();
    (void)job.active_job_arguments();
    (void)job.retry_count();
    (void)job.display_class();
    (void)job.enqueued_at();
    // RawJsonObject round trip: same members, same values (duplicates: the last wins in both).
    auto obj = kiqd::RawJsonObject::parse(job.raw);
    require(obj.has_value(), "a valid Job is not a RawJsonObject");
    require(parse_object(obj->dump(), "RawJsonObject dump") == job.payload(),
            "RawJsonObject round trip changed the payload");
    static const char kHostile[] = "bad \xff\xfe \"quoted\" \0 nul";
    // A failure with hostile text: invalid UTF-8, quotes, a NUL, a long message.
    kiqd::Failure failure{
        "RuntimeError", std::string(kHostile, sizeof kHostile - 1), {"a.rb:1:in `x'", "\xc3"}};
    failure.message += std::string(job.raw.size() % 97, 'x');
    std::mt19937_64 rng(42);
    auto plan = retry.plan(job, failure, 1.7e9, rng);
    // A job that allows no retry (retry: false) is discarded with its payload as it was, for
    // the exhausted hook: nothing edited to check.
    const bool as_it_was =
        plan.outcome == kiqd::FailureOutcome::Discarded && plan.payload == job.raw;
    if (as_it_was) require(plan.exhausted, "a job discarded as it was is not marked exhausted");
    if (!as_it_was && (plan.outcome != kiqd::FailureOutcome::Discarded || !plan.payload.empty())) {
        auto edited = parse_object(plan.payload, "retry payload");
        require(edited["error_class"] == "RuntimeError", "retry payload lost error_class");
        require(edited["retry_count"].is_number_integer(), "retry payload without retry_count");
        for (const auto& [key, value] : job.payload().items()) {
            static const char* owned[] = {"queue",          "error_message", "error_class",
                                          "retried_at",     "failed_at",     "retry_count",
                                          "error_backtrace"};
            bool is_owned = false;
            for (const char* o : owned) is_owned = is_owned || key == o;
            if (!is_owned)
                require(edited.contains(key) && edited[key] == value,
                        "retry payload changed a field it does not own");
        }
        (void)retry.commands(plan);
    }
    parse_object(dead.invalid_entry(job.raw, job.queue, {"Kiqd::Test", "x"}),
                 "dead entry of a job");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const kiqd::Keys keys;
    static const kiqd::DeadSet dead(keys, 10000, 15552000, kiqd::Compat::v6);
    static const kiqd::JobRetry retry(kiqd::Compat::v6, 25, keys, dead);
    // A small size limit so that the fuzzer reaches PayloadTooLarge with short inputs too.
    static const kiqd::JobLimits limits{8192, 256};
    std::string raw(reinterpret_cast<const char*>(data), size);
    try {
        auto parsed = kiqd::parse_job(raw, "default", limits);
        if (auto* invalid = std::get_if<kiqd::InvalidJob>(&parsed))
            check_invalid(raw, *invalid, dead);
        else
            check_job(std::get<kiqd::Job>(parsed), retry, dead);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "fuzz_payload: unexpected exception: %s\n", e.what());
        std::abort();
    }
    return 0;
}
