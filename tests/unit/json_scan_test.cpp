// json_scan must never accept what nlohmann refuses (parse_job trusts its "valid"), and should
// accept what nlohmann accepts (else the job only takes the slow path). Checked on hand-made
// edge cases and on 30,000 random mutations of a Sidekiq payload, against nlohmann::json::accept
// and, for accepted texts, against the fields nlohmann's tree gives.
#include "job/json_scan.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "kiqd/job.hpp"

namespace {

bool scan_valid(const std::string& text) {
    return kiqd::json_scan(text, nullptr, 256).valid;
}

}  // namespace

TEST_CASE("json_scan agrees with nlohmann on edge cases", "[job][json]") {
    const std::vector<std::string> cases = {"{}",
                                            "[]",
                                            "{\"a\":1}",
                                            " {\"a\" : [1, 2.5, -0, 1e5, 1E+2, -3.25e-7]} ",
                                            "\"x\"",
                                            "0",
                                            "-",
                                            "01",
                                            "1.",
                                            ".5",
                                            "1e",
                                            "1e+",
                                            "+1",
                                            "-01",
                                            "1.5e",
                                            "--1",
                                            "0x10",
                                            "Infinity",
                                            "NaN",
                                            "true",
                                            "false",
                                            "null",
                                            "tru",
                                            "nul",
                                            "truex",
                                            "nullnull",
                                            "",
                                            "   ",
                                            "{",
                                            "}",
                                            "[",
                                            "]",
                                            "{,}",
                                            "[,]",
                                            "[1,]",
                                            "{\"a\"}",
                                            "{\"a\":}",
                                            "{\"a\":1,}",
                                            "{\"a\":1}x",
                                            "{\"a\":1}{}",
                                            "{a:1}",
                                            "{'a':1}",
                                            "[1 2]",
                                            "{\"a\":1 \"b\":2}",
                                            std::string("{\"a\":1}\0", 8),
                                            std::string("\"a\0b\"", 5),
                                            "\"tab\there\"",
                                            "\"\\t\\n\\r\\b\\f\\/\\\\\\\"\"",
                                            "\"\\x\"",
                                            "\"\\u12\"",
                                            "\"\\u12g4\"",
                                            "\"\\u00e9\"",
                                            "\"\\uD800\"",
                                            "\"\\uD800\\uDC00\"",
                                            "\"\\uDC00\"",
                                            "\"\\uD800x\"",
                                            "\"\\uD800\\u0041\"",
                                            "\"\\uDBFF\\uDFFF\"",
                                            "\"caf\xc3\xa9\"",
                                            "\"\xc0\x80\"",
                                            "\"\xc1\xbf\"",
                                            "\"\xe0\x80\x80\"",
                                            "\"\xe0\xa0\x80\"",
                                            "\"\xed\xa0\x80\"",
                                            "\"\xed\x9f\xbf\"",
                                            "\"\xf0\x8f\xbf\xbf\"",
                                            "\"\xf0\x90\x80\x80\"",
                                            "\"\xf4\x8f\xbf\xbf\"",
                                            "\"\xf4\x90\x80\x80\"",
                                            "\"\xf5\x80\x80\x80\"",
                                            "\"\xff\"",
                                            "\"\x80\"",
                                            "\"\xc3\"",
                                            "\"\xe2\x82\"",
                                            "\"unterminated",
                                            "{\"a\":\"b\\\"}",
                                            "[[[[[[[[[[]]]]]]]]]]",
                                            "[[[[[]]]]",
                                            "{\"\\u0063lass\":\"W\"}",
                                            "\xef\xbb\xbf{}",
                                            "1e999",
                                            "-1e999",
                                            "1e-999",
                                            "1.5e308",
                                            "[1E400]",
                                            std::string(400, '9'),
                                            std::string(30, '9')};
    // Stricter than nlohmann on purpose, as JSON and Ruby's JSON.parse are: nlohmann ends its
    // input at a NUL byte and skips a byte-order mark (nlohmann_leniency refuses both for it).
    const std::set<std::string> stricter = {std::string("{\"a\":1}\0", 8), "\xef\xbb\xbf{}"};
    for (const auto& text : cases) {
        INFO(text);
        CHECK(scan_valid(text) == (nlohmann::json::accept(text) && !stricter.count(text)));
    }
}

TEST_CASE("json_scan stops at the depth limit and reports the members of the top object",
          "[job][json]") {
    const std::string deep = std::string(300, '[') + std::string(300, ']');
    const auto r = kiqd::json_scan(deep, nullptr, 256);
    CHECK_FALSE(r.valid);
    CHECK(r.too_deep);
    CHECK(kiqd::json_scan(deep, nullptr, 300).valid);

    struct Collect : kiqd::JsonMemberVisitor {
        std::vector<std::pair<std::string, std::string>> seen;
        void member(std::string_view key, std::string_view value) override {
            seen.emplace_back(key, value);
        }
    } collect;
    const auto ok =
        kiqd::json_scan(R"( {"class" : "W", "args":[{"jid":"x"}] ,"n":-1.5e3} )", &collect, 256);
    CHECK(ok.valid);
    CHECK(ok.is_object);
    CHECK(ok.max_depth == 3);
    CHECK(collect.seen ==
          std::vector<std::pair<std::string, std::string>>{
              {"\"class\"", "\"W\""}, {"\"args\"", R"([{"jid":"x"}])"}, {"\"n\"", "-1.5e3"}});
}

TEST_CASE("json_scan and parse_job agree with nlohmann on random mutations of a payload",
          "[job][json]") {
    const std::string base =
        R"({"class":"Kiqd::Noop","args":[1,"caf\u00e9",{"k":[true,null]}],"queue":"default",)"
        R"("jid":"b4a577edbccf1d805744efa9","retry":true,"created_at":1795312741.2503,)"
        "\"enqueued_at\":1795312741250,\"retry_count\":3,\"display_class\":\"D\xc3\xa9\"}";
    std::mt19937 rng(20261122);
    const std::string alphabet = "{}[]\",:\\.-+eE0123456789 tfnul\x80\xc3\xed\xf4\xff\x01";
    int accepted = 0;
    for (int round = 0; round < 30000; ++round) {
        std::string text = base;
        const int edits = 1 + static_cast<int>(rng() % 3);
        for (int e = 0; e < edits && !text.empty(); ++e) {
            const size_t at = rng() % text.size();
            const char c = alphabet[rng() % alphabet.size()];
            switch (rng() % 3) {
                case 0:
                    text[at] = c;
                    break;
                case 1:
                    text.insert(text.begin() + static_cast<long>(at), c);
                    break;
                default:
                    text.erase(at, 1);
            }
        }
        const bool reference = nlohmann::json::accept(text);
        INFO(text);
        if (text.find('\0') == std::string::npos) REQUIRE(scan_valid(text) == reference);
        if (scan_valid(text)) REQUIRE(reference);
        auto parsed = kiqd::parse_job(text, "q");
        if (!reference || !std::holds_alternative<kiqd::Job>(parsed)) continue;
        ++accepted;
        const auto& job = std::get<kiqd::Job>(parsed);
        const auto tree = nlohmann::json::parse(text);
        REQUIRE(job.payload() == tree);
        REQUIRE(job.job_class == tree.at("class").get<std::string>());
        auto rc = tree.find("retry_count");
        REQUIRE(job.retry_count() == (rc != tree.end() && rc->is_number_integer()
                                          ? std::optional<long long>(rc->get<long long>())
                                          : std::nullopt));
        auto ea = tree.find("enqueued_at");
        REQUIRE(job.enqueued_at().has_value() == (ea != tree.end() && ea->is_number()));
    }
    CHECK(accepted > 1000);  // the mutations exercised the accepting side too
}
