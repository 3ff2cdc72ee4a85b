// The whole path of a payload — json_scan, parse_job, the tree, RawJsonObject, the retry entry
// and the dead entry — must give one verdict and lose nothing (tests/fuzz/job_path_invariants.hpp
// states the promises; fuzz_job_path checks the same ones on random inputs). A payload that
// starts with a UTF-8 byte-order mark or holds a NUL byte is refused everywhere, as Ruby's
// JSON.parse (and so Sidekiq) refuses it: nlohmann's lexer skips the mark and reads a NUL as the
// end of the input, and those two leniencies once let the slow parser run a job whose retry
// entry RawJsonObject could not build.
#include <catch2/catch.hpp>
#include <random>

#include "fuzz/job_path_invariants.hpp"

using namespace kiqd;

namespace {

const std::string kBom = "\xEF\xBB\xBF";
const std::string kJob =
    R"({"class":"Kiqd::Fail","args":[1,"caf\u00e9",{"k":[true,null]}],"queue":"default",)"
    R"("jid":"b4a577edbccf1d805744efa9","retry":true,"created_at":1795312741.2503,)"
    "\"enqueued_at\":1795312741250,\"retry_count\":3,\"display_class\":\"D\xc3\xa9\"}";

std::string nul(std::string_view before, std::string_view after = "") {
    return std::string(before) + std::string(1, '\0') + std::string(after);
}

// The text with control and non-ASCII bytes as \xHH, for failure messages.
std::string shown(const std::string& text) {
    static const char kHex[] = "0123456789abcdef";
    std::string out;
    for (unsigned char c : text) {
        if (c >= 0x20 && c < 0x7f) {
            out += static_cast<char>(c);
        } else {
            out += "\\x";
            out += kHex[c >> 4];
            out += kHex[c & 15];
        }
    }
    return out;
}

void require_path_holds(const std::string& text) {
    INFO("payload: " << shown(text));
    const std::string broken = job_path::check_job_path(text);
    INFO("broken: " << broken);
    REQUIRE(broken.empty());
}

// The dead-set entry of a refused payload, parsed.
nlohmann::json refused_entry(const std::string& raw) {
    static const Keys keys;
    static const DeadSet dead(keys, 10000, 15552000, Compat::v6);
    auto parsed = parse_job(raw, "default");
    REQUIRE(std::holds_alternative<InvalidJob>(parsed));
    const auto& why = std::get<InvalidJob>(parsed);
    CHECK(why.error_class == "JSON::ParserError");
    return nlohmann::json::parse(dead.invalid_entry(raw, "default", why));
}

}  // namespace

TEST_CASE("a payload with a byte-order mark or a NUL byte is refused and kept whole",
          "[job][json][pipeline]") {
    for (const std::string& raw : {kBom + kJob, kBom + " \n" + kJob, nul(kJob), nul(kJob, "junk"),
                                   nul(kJob + " ", "{}"), nul(kBom + kJob)}) {
        INFO(shown(raw));
        const auto entry = refused_entry(raw);
        CHECK(entry["class"] == "Kiqd::InvalidJob");
        CHECK(entry["args"] == nlohmann::json::array({raw}));  // the original bytes
        CHECK(entry["queue"] == "default");
        CHECK_FALSE(entry["error_message"].get<std::string>().empty());
        CHECK_FALSE(RawJsonObject::parse(raw).has_value());
    }
    // The mark or a NUL inside a string is text like any other: U+FEFF is valid there, a raw
    // NUL (a control character) is not.
    CHECK(std::holds_alternative<Job>(parse_job(R"({"class":")" + kBom + R"(W","args":[]})", "q")));
    refused_entry(nul(R"({"class":"W","args":[")", R"("]})"));
}

TEST_CASE("the payload path keeps its promises on edge cases", "[job][json][pipeline]") {
    const std::string bare = R"({"class":"W","args":[]})";
    const std::vector<std::string> cases = {
        kJob,
        bare,
        " \t\r\n" + bare + " \n",
        R"({"class":"W","args":[],"jid":"j","retry":false})",
        R"({"class":"W","args":[],"retry":0,"dead":false})",
        R"({"class":"W","args":[{"queue":"nested","class":"X"}],"queue":"q"})",
        R"({"class":"A","class":"W","args":[],"args":[2],"jid":"1","jid":"2"})",
        R"({"\u0063lass":"W","args":[],"x\"y":1})",
        R"({"class":"W","args":[],"error_message":"old","error_class":"Old","failed_at":1})",
        R"({"class":"W","args":[],"backtrace":2,"retry_for":1,"failed_at":1})",
        R"({"class":"W","wrapped":"Job","args":[{"arguments":[1]}],"display_class":"D"})",
        R"({"class":"W","args":[1e999]})",
        R"({"class":"W","args":[1e308,-0,1E+2]})",
        "{\"class\":\"W\",\"args\":[\"\xed\xa0\x80\"]}",
        "{\"class\":\"W\",\"args\":[\"\xff\"]}",
        "{\"class\":\"W\",\"args\":[\"\xc3\"]}",
        R"({"class":"W","args":["\ud800"]})",
        R"({"class":"W","args":["\ud83d\ude00"]})",
        R"({"class":"W","args":[],})",
        R"({"class":"W","args":[1,]})",
        R"({"class":"W","args":[]} {})",
        R"({"class":"W","args":[]}x)",
        R"(/*c*/{"class":"W","args":[]})",
        R"({"args":[]})",
        R"({"class":"","args":[]})",
        R"({"class":7,"args":[]})",
        R"({"class":"W","args":{}})",
        R"({"class":"W","jid":5})",
        R"({})",
        "[]",
        "[" + bare + "]",
        "\"x\"",
        "0",
        "null",
        "",
        " ",
        "not json",
        "\xff\xfe",
        std::string(300, '[') + std::string(300, ']'),
        "{\"class\":\"W\",\"args\":" + std::string(300, '[') + std::string(300, ']') + "}",
        // The byte-order mark: alone, before an object, doubled, partial, misplaced.
        kBom,
        kBom + bare,
        kBom + kJob,
        kBom + " " + bare,
        " " + kBom + bare,
        kBom + kBom + bare,
        "\xEF\xBB" + bare,
        "\xEF" + bare,
        bare + kBom,
        kBom + "[]",
        kBom + "\"x\"",
        kBom + R"({"args":[]})",
        kBom + "{\"class\":\"W\",\"args\":[\"\xff\"]}",
        R"({"class":")" + kBom + R"(W","args":[]})",
        // A NUL byte: after the value, before it, inside a string, between members, alone.
        nul(bare),
        nul(bare, "junk"),
        nul(bare, bare),
        nul(bare + " \n"),
        nul(kJob, "\xff"),
        nul("", bare),
        nul(""),
        nul(R"({"class":"W","args":[")", R"("]})"),
        nul(R"({"class":"W")", R"(,"args":[]})"),
        nul(R"({"class":"W","args":[1)", R"(]})"),
        nul(R"({"args":[]})", "x"),
        nul("[]"),
        nul(kBom + bare),
    };
    for (const auto& text : cases) require_path_holds(text);
}

TEST_CASE("the payload path keeps its promises on seeded mutations of a payload",
          "[job][json][pipeline]") {
    const std::vector<std::string> bases = {kJob, kBom + kJob, nul(kJob, "x")};
    // JSON's structural bytes, the byte-order mark's bytes, NUL and broken UTF-8.
    const std::string alphabet =
        std::string("{}[]\",:\\.-+eE0 tfnul\xEF\xBB\xBF\x80\xc3\xff\x01") + std::string(1, '\0');
    std::mt19937 rng(20260518);
    int accepted = 0, refused = 0;
    for (int round = 0; round < 20000; ++round) {
        std::string text = bases[rng() % bases.size()];
        const int edits = 1 + static_cast<int>(rng() % 3);
        for (int e = 0; e < edits && !text.empty(); ++e) {
            const size_t at = rng() % text.size();
            const char c = alphabet[rng() % alphabet.size()];
            switch (rng() % 5) {
                case 0:
                    text[at] = c;
                    break;
                case 1:
                    text.insert(text.begin() + static_cast<long>(at), c);
                    break;
                case 2:
                    text.erase(at, 1);
                    break;
                case 3:  // a whole mark somewhere
                    text.insert(at, kBom);
                    break;
                default:  // or the mark taken off the front
                    if (text.rfind(kBom, 0) == 0) text.erase(0, kBom.size());
            }
        }
        require_path_holds(text);
        (std::holds_alternative<Job>(parse_job(text, "q")) ? accepted : refused)++;
    }
    // Both sides of every verdict were exercised.
    CHECK(accepted > 1000);
    CHECK(refused > 1000);
}

TEST_CASE("a failed job whose payload cannot be edited goes to the dead set whole",
          "[job][retry][pipeline]") {
    // parse_job never makes such a Job; a Job built by hand (or a parser bug) can be one, and the
    // retry path must then keep the original rather than rebuild a fragment of it.
    Keys keys;
    DeadSet dead(keys, 10000, 15552000, Compat::v6);
    JobRetry retry(Compat::v6, 25, keys, dead);
    std::mt19937_64 rng(1);
    for (const std::string& raw : {kBom + kJob, std::string("not json"), nul(kJob, "x"),
                                   std::string("\xff{"), std::string()}) {
        INFO(shown(raw));
        Job job;
        job.raw = raw;
        job.queue = "default";
        job.job_class = "Kiqd::Fail";
        RetryPlan plan;
        REQUIRE_NOTHROW(plan = retry.plan(job, {"RuntimeError", "boom", {"a.rb:1"}}, 1.7e9, rng));
        CHECK(plan.outcome == FailureOutcome::Dead);
        CHECK(plan.score == 1.7e9);
        const auto entry = nlohmann::json::parse(plan.payload);
        CHECK(entry["class"] == "Kiqd::InvalidJob");
        const auto kept = entry["args"][0].get<std::string>();
        if (entry.value("kiqd_raw_base64", false))
            CHECK(base64_decode(kept) == raw);  // the bytes were not UTF-8
        else
            CHECK(kept == raw);
        CHECK(entry["queue"] == "default");
        CHECK_THAT(entry["error_message"].get<std::string>(),
                   Catch::Contains("RuntimeError: boom"));
        // The dead entry, bare (the fetcher makes it one transaction with the acknowledgement).
        CHECK(retry.commands(plan).front() ==
              redis::Command{"ZADD", "dead", score_text(1.7e9), plan.payload});
    }
}
