#include "kiqd/job.hpp"

#include <catch2/catch.hpp>

#include "job/dead_set.hpp"
#include "kiqd/client.hpp"
#include "kiqd/clock.hpp"

using namespace kiqd;

namespace {
InvalidJob invalid(const std::string& raw, JobLimits limits = {}) {
    auto parsed = parse_job(raw, "default", limits);
    REQUIRE(std::holds_alternative<InvalidJob>(parsed));
    return std::get<InvalidJob>(parsed);
}
}  // namespace

TEST_CASE("a Sidekiq payload parses; ActiveJob dispatches on wrapped", "[job]") {
    auto parsed = parse_job(
        R"({"class":"ActiveJob::QueueAdapters::SidekiqAdapter::JobWrapper","wrapped":"ReportJob",)"
        R"("queue":"default","args":[{"job_class":"ReportJob","arguments":[7]}],"jid":"j1",)"
        R"("retry_count":2,"enqueued_at":1795312741.5})",
        "default");
    REQUIRE(std::holds_alternative<Job>(parsed));
    auto& job = std::get<Job>(parsed);
    CHECK(job.handler_name() == "ReportJob");
    CHECK(job.display_class() == "ReportJob");
    CHECK(job.jid == "j1");
    CHECK(job.retry_count() == 2);
    REQUIRE(job.active_job_arguments());
    CHECK((*job.active_job_arguments())[0] == 7);
    CHECK(job.enqueued_at() == Approx(1795312741.5));
}

TEST_CASE("bad payloads are refused with a reason", "[job]") {
    CHECK(invalid("not json").error_class == "JSON::ParserError");
    CHECK(invalid("[1,2]").error_message == "payload is not a JSON object");
    CHECK(invalid(R"({"args":[]})").error_message == "missing \"class\"");
    CHECK(invalid(R"({"class":7})").error_message == "\"class\" is not a string");
    CHECK(invalid(R"({"class":""})").error_message == "\"class\" is empty");
    CHECK(invalid(R"({"class":"W","args":{}})").error_message == "\"args\" is not an array");
    CHECK(invalid(R"({"class":"W","jid":5})").error_message == "\"jid\" is not a string");
    CHECK(invalid("{\"class\":\"W\",\"args\":[\"\xff\"]}").error_class == "JSON::ParserError");
    CHECK(invalid(std::string(300, '[') + std::string(300, ']')).error_message ==
          "payload nests deeper than 256 levels");
    CHECK(invalid(R"({"class":"W","args":[]})", JobLimits{10, 256}).error_class ==
          "Kiqd::PayloadTooLarge");
}

TEST_CASE("parse_job's one pass reads the same fields as a full parse", "[job]") {
    // The reference: the same fields read from nlohmann's tree, as kiqd did before.
    auto check = [](const std::string& raw) {
        INFO(raw);
        auto parsed = parse_job(raw, "q");
        REQUIRE(std::holds_alternative<Job>(parsed));
        const auto& job = std::get<Job>(parsed);
        const auto tree = nlohmann::json::parse(raw);
        CHECK(job.payload() == tree);
        CHECK(job.job_class == tree["class"].get<std::string>());
        CHECK(job.wrapped == tree.value("wrapped", ""));
        CHECK(job.jid == tree.value("jid", ""));
        auto dc = tree.find("display_class");
        CHECK(job.display_class() ==
              (dc != tree.end() && dc->is_string() ? dc->get<std::string>() : job.handler_name()));
        auto rc = tree.find("retry_count");
        CHECK(job.retry_count() == (rc != tree.end() && rc->is_number_integer()
                                        ? std::optional<long long>(rc->get<long long>())
                                        : std::nullopt));
        auto ea = tree.find("enqueued_at");
        if (ea != tree.end() && ea->is_number())
            CHECK(job.enqueued_at() ==
                  Approx(timestamp_seconds(ea->get<double>(), ea->is_number_integer())));
        else
            CHECK_FALSE(job.enqueued_at());
    };
    check(R"({"class":"W","args":[]})");
    // Look-alike keys nested in args and in other members do not count.
    check(R"({"args":[{"class":"X","jid":"no","enqueued_at":1}],"class":"W",)"
          R"("meta":{"retry_count":9,"display_class":"no"},"jid":"j"})");
    // Duplicates: the last wins, as in the tree.
    check(R"({"class":"A","class":"B","jid":"1","jid":"2","retry_count":1,"retry_count":"x"})");
    check(R"({"class":"W","enqueued_at":1795312741.25,"retry_count":3,"display_class":"D"})");
    check(R"({"class":"W","enqueued_at":1795312741250,"display_class":7})");  // Sidekiq 8 ms
    check(R"({"class":"W","enqueued_at":"soon","retry_count":2.5,"wrapped":"R"})");
    // A non-string duplicate after a string, and the reverse, decide the verdict the same way.
    CHECK(invalid(R"({"class":"W","class":7})").error_message == "\"class\" is not a string");
    CHECK(std::holds_alternative<Job>(parse_job(R"({"class":7,"class":"W"})", "q")));
    CHECK(invalid(R"({"class":"W","args":[],"args":null})").error_message ==
          "\"args\" is not an array");
    // The parser's message is nlohmann's own, word for word.
    std::string expected;
    try {
        const auto never = nlohmann::json::parse(R"({"class":"W",})");
        static_cast<void>(never);
    } catch (const nlohmann::json::exception& e) {
        expected = e.what();
    }
    CHECK(invalid(R"({"class":"W",})").error_message == expected);
    // A Job not made by parse_job has an empty payload, not an exception.
    CHECK(Job{}.payload().empty());
}

TEST_CASE("members are read from the payload's text without its tree", "[job][memory]") {
    // Duplicates (the last wins), an escaped key, a nested look-alike, whitespace, a member
    // outside the index, and args skipped up to the one asked for.
    const std::string raw =
        R"({ "class" : "Kiqd::Noop", "lock":"until_executed", "args" : [ {"lock":1}, "two" ,[3] ],)"
        R"("\u006cock_ttl": 5 , "lock":"while_executing", "custom":{"a":[1,{"b":"}"}]} })";
    auto parsed = parse_job(raw, "default");
    REQUIRE(std::holds_alternative<Job>(parsed));
    Job unindexed;  // as tests and plugins build one: found on first use
    unindexed.raw = raw;
    for (const Job* job : {&std::get<Job>(parsed), &unindexed}) {
        CHECK(job->member_json("lock") == std::optional<std::string_view>(R"("while_executing")"));
        CHECK(job->member("lock_ttl") == nlohmann::json(5));
        CHECK(job->member_json("custom") ==
              std::optional<std::string_view>(R"({"a":[1,{"b":"}"}]})"));
        CHECK_FALSE(job->member_json("retry"));
        CHECK_FALSE(job->member("b"));
        CHECK(job->arg_json(0) == std::optional<std::string_view>(R"({"lock":1})"));
        CHECK(job->arg_json(1) == std::optional<std::string_view>(R"("two")"));
        CHECK(job->arg_json(2) == std::optional<std::string_view>("[3]"));
        CHECK_FALSE(job->arg_json(3));
        CHECK(job->members({"lock", "lock_ttl", "retry"}) ==
              nlohmann::json{{"lock", "while_executing"}, {"lock_ttl", 5}});
    }
    CHECK_FALSE(Job{}.member_json("class"));
    CHECK_FALSE(Job{}.arg_json(0));
}

TEST_CASE("dead-set entries for unrunnable payloads keep the original", "[job]") {
    Keys keys;
    DeadSet dead(keys, 10000, 100, Compat::v6);
    auto wrapped = nlohmann::json::parse(dead.invalid_entry("not json", "q", {"E", "why"}));
    CHECK(wrapped["class"] == "Kiqd::InvalidJob");
    CHECK(wrapped["args"][0] == "not json");
    CHECK(wrapped["error_message"] == "why");
    CHECK(wrapped["jid"].get<std::string>().size() == 24);
    auto binary = nlohmann::json::parse(dead.invalid_entry("\xff\xfe", "q", {"E", "why"}));
    CHECK(binary["kiqd_raw_base64"] == true);
    CHECK(binary["args"][0] == "//4=");
    auto obj = dead.invalid_entry(R"({"args":[1],"zz":true})", "q", {"Kiqd::InvalidJob", "no"});
    CHECK_THAT(obj, Catch::StartsWith(R"({"args":[1],"zz":true,"jid":)"));
    auto cmds = dead.kill_commands("x", 1000.0);
    // One guarded script (redis/transaction.hpp): each command's word count, then its words.
    REQUIRE(cmds.size() == 1);
    CHECK(cmds[0][0] == "EVAL");
    const redis::Command tail(cmds[0].end() - 5, cmds[0].end());
    CHECK(tail == redis::Command{"4", "ZREMRANGEBYRANK", "dead", "0", "-10000"});
}

TEST_CASE("the client fills what Sidekiq's client fills", "[job]") {
    Keys keys("ns");
    Client client(keys, Compat::v6);
    auto p = client.prepare({{"class", "HardWorker"}, {"args", {1, "two"}}});
    auto j = nlohmann::json::parse(p.payload);
    CHECK(j["queue"] == "default");
    CHECK(j["retry"] == true);
    CHECK(j["jid"].get<std::string>().size() == 24);
    CHECK(j["created_at"].is_number_float());
    CHECK(j["enqueued_at"].is_number_float());
    CHECK_FALSE(p.at);
    auto cmds = client.push_commands({p});
    REQUIRE(cmds.size() == 2);
    CHECK(cmds[0] == redis::Command{"SADD", "ns:queues", "default"});
    CHECK(cmds[1][1] == "ns:queue:default");

    auto later = client.prepare({{"class", "W"}, {"at", epoch_seconds() + 60}});
    REQUIRE(later.at);
    CHECK_FALSE(nlohmann::json::parse(later.payload).contains("at"));
    CHECK_FALSE(nlohmann::json::parse(later.payload).contains("enqueued_at"));
    CHECK(client.push_commands({later})[0][0] == "ZADD");
    CHECK_THROWS_AS(client.prepare({{"args", nlohmann::json::array()}}), std::invalid_argument);
    CHECK_THROWS_AS(client.prepare({{"class", "W"}, {"args", 1}}), std::invalid_argument);
}
