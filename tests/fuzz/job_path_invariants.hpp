#pragma once
// The promises a fetched payload's whole path through kiqd keeps, whatever its bytes: shared by
// the libFuzzer target fuzz_job_path (random inputs) and the unit test payload_pipeline_test
// (edge cases and seeded mutations, in every CI run), so that both check the same contract.
//
// 1. One verdict. json_scan (parse_job's fast path), parse_job and RawJsonObject (which edits
//    payloads for the retry and dead sets) agree on whether a text is JSON and whether it is an
//    object — a payload one of them accepts and another refuses is how a job got lost.
// 2. An accepted job's tree (Job::payload) and its RawJsonObject members are the same values,
//    and so are the members read without a tree (Job::member_json, as parse_job noted them and
//    as a Job not made by parse_job finds them) and each argument (Job::arg_json).
// 3. The retry (or exhausted: dead) entry of a failed job is strict JSON and keeps every member
//    it does not own — class, args and jid among them — byte for byte.
// 4. The dead entry of a refused payload is strict JSON, names the reason and keeps the original
//    bytes: as args[0] of a Kiqd::InvalidJob wrapper (Base64 when they are not UTF-8), or, for a
//    JSON object, as every member of the original byte for byte beside the reason.
// check_job_path returns the first promise broken, or an empty string. It never aborts, so the
// unit test can report the input; the fuzz target aborts on a non-empty answer.
#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "job/backtrace_codec.hpp"
#include "job/dead_set.hpp"
#include "job/job_retry.hpp"
#include "job/json_scan.hpp"
#include "job/raw_json_object.hpp"
#include "kiqd/job.hpp"
#include "kiqd/keys.hpp"

namespace kiqd::job_path {

// Members the retry path writes (Sidekiq's JobRetry owns them); every other one must survive.
inline constexpr std::string_view kRetryOwned[] = {"queue",          "error_message", "error_class",
                                                   "retried_at",     "failed_at",     "retry_count",
                                                   "error_backtrace"};
// Members a dead entry for a refused payload writes: the reason, and jid/queue only when absent.
inline constexpr std::string_view kDeadOwned[] = {"error_class", "error_message", "failed_at"};

// Every member of `original` (keys from its tree) not in `owned` is in `entry` with the same raw
// text. Empty when so, else which member was lost or changed.
inline std::string members_kept(const RawJsonObject& original, const nlohmann::json& tree,
                                const RawJsonObject& entry, std::span<const std::string_view> owned,
                                const char* what) {
    for (const auto& [key, value] : tree.items()) {
        if (std::find(owned.begin(), owned.end(), key) != owned.end()) continue;
        const std::string* before = original.find(key);
        const std::string* after = entry.find(key);
        if (!before || !after || *before != *after)
            return std::string(what) + " lost or changed member \"" + key + "\"";
    }
    return {};
}

// json_scan recurses: past this depth (only a refused, too deep payload's dead entry gets there)
// the check is left to RawJsonObject, whose parser does not.
inline constexpr size_t kScanDepth = 1024;

inline bool strict_object(const std::string& text) {
    if (json_nesting_depth(text) > kScanDepth) return RawJsonObject::parse(text).has_value();
    const auto scan = json_scan(text, nullptr, kScanDepth);
    return scan.valid && scan.is_object;
}

// Promise 4 for `raw`, refused (or about to be killed) with `why`.
inline std::string check_dead_entry(const std::string& raw, const std::optional<RawJsonObject>& obj,
                                    const DeadSet& dead, const InvalidJob& why) {
    const std::string text = dead.invalid_entry(raw, "default", why);
    if (!strict_object(text)) return "dead entry is not a strict JSON object";
    const auto entry = RawJsonObject::parse(text);
    const auto tree = nlohmann::json::parse(text, nullptr, false);
    if (!entry || !tree.is_object()) return "dead entry is not readable";
    if (tree.value("error_class", "") != why.error_class) return "dead entry lost the reason";
    if (!tree.contains("error_message") || !tree.contains("jid") || !tree.contains("failed_at"))
        return "dead entry without error_message, jid or failed_at";
    if (obj) {
        const auto original = nlohmann::json::parse(raw, nullptr, false);
        if (!original.is_object()) return "RawJsonObject accepted what nlohmann cannot parse";
        return members_kept(*obj, original, *entry, kDeadOwned, "dead entry");
    }
    // Not an object kiqd can edit: the wrapper holds the original bytes.
    if (tree.value("class", "") != "Kiqd::InvalidJob") return "wrapper without its class";
    const auto& args = tree["args"];
    if (!args.is_array() || args.size() != 1 || !args[0].is_string())
        return "wrapper args are not [original]";
    const auto kept = args[0].get<std::string>();
    if (tree.value("kiqd_raw_base64", false)) {
        if (base64_decode(kept) != raw) return "wrapper's Base64 is not the original bytes";
    } else if (kept != raw) {
        return "wrapper's args[0] is not the original bytes";
    }
    return {};
}

// Promise 2 for the readers without a tree: every member of the tree (and a few absent ones),
// through the index parse_job filled and through a Job that finds its members on first use.
inline std::string check_members(const Job& job, const RawJsonObject& obj,
                                 const nlohmann::json& tree) {
    Job unindexed;
    unindexed.raw = job.raw;
    std::vector<std::string> keys{"lock", "retry", "fair_tenant", "no such member"};
    for (const auto& [key, value] : tree.items()) keys.push_back(key);
    for (const auto& key : keys) {
        const std::string* expected = obj.find(key);
        for (const Job* j : {&job, static_cast<const Job*>(&unindexed)}) {
            const auto text = j->member_json(key);
            if (text.has_value() != (expected != nullptr) || (text && *text != *expected))
                return "member_json(\"" + key + "\") is not the member's text";
            const auto value = j->member(key);
            if (value.has_value() != tree.contains(key) || (value && *value != tree[key]))
                return "member(\"" + key + "\") is not the tree's member";
        }
    }
    const auto args = tree.find("args");
    const size_t count = args != tree.end() && args->is_array() ? args->size() : 0;
    for (size_t i = 0; i <= count && i < 64; ++i) {
        const auto text = job.arg_json(i);
        if (text.has_value() != (i < count) ||
            (text && nlohmann::json::parse(*text, nullptr, false) != (*args)[i]))
            return "arg_json(" + std::to_string(i) + ") is not the tree's argument";
    }
    return {};
}

// Promises 2 and 3 for an accepted job.
inline std::string check_accepted(const Job& job, const std::optional<RawJsonObject>& obj,
                                  const JobRetry& retry, const DeadSet& dead) {
    if (!obj) return "an accepted job is not a RawJsonObject";
    const nlohmann::json* tree = nullptr;
    try {
        tree = &job.payload();
    } catch (const std::exception&) {
        return "the tree of an accepted job cannot be built";
    }
    if (nlohmann::json::parse(obj->dump(), nullptr, false) != *tree)
        return "RawJsonObject and the tree disagree";
    if (!tree->contains("class") || (*tree)["class"] != job.job_class)
        return "job_class is not the tree's class";
    if (job.jid != tree->value("jid", "")) return "jid is not the tree's jid";
    if (auto wrong = check_members(job, *obj, *tree); !wrong.empty()) return wrong;

    // A failure with hostile text: invalid UTF-8, quotes, a NUL.
    static const char kHostile[] = "bad \xff\xfe \"quoted\" \0 nul";
    const Failure failure{
        "RuntimeError", std::string(kHostile, sizeof kHostile - 1), {"a.rb:1:in `x'", "\xc3"}};
    std::mt19937_64 rng(42);
    const auto plan = retry.plan(job, failure, 1.7e9, rng);
    if (plan.outcome != FailureOutcome::Discarded) {
        if (!strict_object(plan.payload)) return "retry entry is not a strict JSON object";
        const auto entry = RawJsonObject::parse(plan.payload);
        if (!entry) return "retry entry is not readable";
        for (const char* key : {"class", "args", "jid"}) {
            const std::string* before = obj->find(key);
            const std::string* after = entry->find(key);
            if ((before == nullptr) != (after == nullptr) || (before && *before != *after))
                return std::string("retry entry lost or changed \"") + key + "\"";
        }
        if (auto lost = members_kept(*obj, *tree, *entry, kRetryOwned, "retry entry");
            !lost.empty())
            return lost;
        (void)retry.commands(plan);
    }
    // An accepted job can still be killed (a unique-lock conflict): same promise as a refusal.
    return check_dead_entry(job.raw, obj, dead, {"Kiqd::Test", "killed"});
}

inline std::string check_job_path(const std::string& raw, const JobLimits& limits = {}) {
    static const Keys keys;
    static const DeadSet dead(keys, 10000, 15552000, Compat::v6);
    static const JobRetry retry(Compat::v6, 25, keys, dead);

    const auto scan = json_scan(raw, nullptr, limits.max_nesting_depth);
    const auto parsed = parse_job(raw, "default", limits);
    const auto obj = RawJsonObject::parse(raw);
    const auto* invalid = std::get_if<InvalidJob>(&parsed);

    // Promise 1, for texts judged on their JSON (a payload too large or too deep is refused
    // before that, and json_scan stops at the depth limit).
    const bool judged = raw.size() <= limits.max_payload_bytes &&
                        json_nesting_depth(raw) <= limits.max_nesting_depth;
    if (judged) {
        const bool job_says_json = !invalid || invalid->error_class != "JSON::ParserError";
        if (job_says_json != scan.valid) return "parse_job and json_scan disagree on JSON";
        if (obj.has_value() != (scan.valid && scan.is_object))
            return "RawJsonObject and json_scan disagree on a JSON object";
    }
    if (invalid) {
        if (invalid->error_class.empty() || invalid->error_message.empty())
            return "a refusal without a reason";
        return check_dead_entry(raw, obj, dead, *invalid);
    }
    return check_accepted(std::get<Job>(parsed), obj, retry, dead);
}

}  // namespace kiqd::job_path
