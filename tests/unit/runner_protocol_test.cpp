// The runner protocol's frames (handlers/runner_protocol.hpp): any bytes survive, split reads
// reassemble, and malformed frames and replies are named.
#include "handlers/runner_protocol.hpp"

#include <catch2/catch.hpp>

using namespace kiqd::runner;

TEST_CASE("runner frames carry any bytes and reassemble from pieces", "[runner_protocol]") {
    std::string payload;
    for (int i = 0; i < 256; ++i) payload.push_back(static_cast<char>(i));
    // The literal's own length: a NUL ends a plain char* append, and the NUL and "tail" are
    // what this checks.
    static constexpr char kTail[] = "\n\n{\"class\":\"X\"}\0tail";
    payload.append(kTail, sizeof kTail - 1);
    const std::string wire = encode_frame("job", payload) + encode_frame("done", "{}");
    FrameReader reader;
    std::vector<Frame> frames;
    for (char c : wire) {  // one byte at a time: the worst split
        reader.feed(&c, 1);
        while (auto f = reader.next()) frames.push_back(*f);
    }
    REQUIRE(frames.size() == 2);
    CHECK(frames[0].type == "job");
    CHECK(frames[0].data == payload);
    CHECK(frames[1].type == "done");
    CHECK_FALSE(reader.malformed());
    CHECK(reader.pending() == 0);
    // Big-endian length of "job\n" + payload.
    const size_t len = payload.size() + 4;
    CHECK(wire.substr(0, 4) ==
          std::string{0, 0, static_cast<char>(len >> 8), static_cast<char>(len & 0xFF)});
}

TEST_CASE("malformed runner frames", "[runner_protocol]") {
    SECTION("no type line") {
        FrameReader r;
        r.feed("\0\0\0\3abc", 7);
        CHECK_FALSE(r.next());
        CHECK(r.malformed());
        CHECK(r.error() == "a frame without a type line");
    }
    SECTION("too long") {
        FrameReader r;
        r.feed("\x7f\0\0\0", 4);
        CHECK_FALSE(r.next());
        CHECK(r.malformed());
    }
    SECTION("incomplete is not malformed") {
        FrameReader r;
        r.feed(
            "\0\0\0\x09"
            "done\n",
            9);
        CHECK_FALSE(r.next());
        CHECK_FALSE(r.malformed());
    }
}

TEST_CASE("runner replies", "[runner_protocol]") {
    std::string error;
    auto ok = parse_reply({"done", "{}"}, error);
    REQUIRE(ok);
    CHECK(ok->ok);
    auto fail = parse_reply(
        {"fail",
         R"({"class":"ArgumentError","message":"bad","backtrace":["a.rb:1:in `x'",2],"retry_in":30.5})"},
        error);
    REQUIRE(fail);
    CHECK_FALSE(fail->ok);
    CHECK(fail->error_class == "ArgumentError");
    CHECK(fail->message == "bad");
    CHECK(fail->backtrace == std::vector<std::string>{"a.rb:1:in `x'", "2"});
    CHECK(fail->retry_in == 30);
    auto no_delay = parse_reply({"fail", R"({"class":"E","retry_in":0})"}, error);
    REQUIRE(no_delay);
    CHECK_FALSE(no_delay->retry_in);
    CHECK_FALSE(parse_reply({"fail", R"({"message":"no class"})"}, error));
    CHECK(error == "a fail frame without a string \"class\"");
    CHECK_FALSE(parse_reply({"fail", "not json"}, error));
    CHECK_FALSE(parse_reply({"ready", "{}"}, error));
    CHECK(error == "an unexpected 'ready' frame instead of done, fail or throttled");
    auto ready = parse_ready({"ready", R"({"pid":42,"runner":"r 1"})"}, error);
    REQUIRE(ready);
    CHECK(ready->pid == 42);
    CHECK(ready->runner == "r 1");
}

TEST_CASE("retry decisions in fail frames", "[runner_protocol]") {
    std::string error;
    auto retry = parse_reply(
        {"fail", R"({"class":"E","decision":"retry","retry_at":1700000042.5,"retry_in":"kill"})"},
        error);
    REQUIRE(retry);
    CHECK(retry->decision == Decision::retry);
    CHECK(retry->retry_at == 1700000042.5);
    CHECK(retry->give_up == GiveUp::no);  // the decision says it all
    CHECK(retry->awaits_written());
    auto dead = parse_reply({"fail", R"({"class":"E","decision":"dead"})"}, error);
    REQUIRE(dead);
    CHECK(dead->decision == Decision::dead);
    CHECK(dead->awaits_written());
    auto gone = parse_reply({"fail", R"({"class":"E","decision":"discard"})"}, error);
    REQUIRE(gone);
    CHECK(gone->decision == Decision::discard);
    CHECK_FALSE(gone->awaits_written());
    auto plain = parse_reply({"fail", R"({"class":"E"})"}, error);
    REQUIRE(plain);
    CHECK(plain->decision == Decision::none);
    CHECK_FALSE(plain->awaits_written());
    CHECK_FALSE(parse_reply({"fail", R"({"class":"E","decision":"later"})"}, error));
    CHECK(error == "a fail frame whose \"decision\" is not retry, dead or discard");
    CHECK_FALSE(parse_reply({"fail", R"({"class":"E","decision":"retry"})"}, error));
    CHECK(error == "a retry decision without a positive \"retry_at\"");
    CHECK_FALSE(parse_reply({"fail", R"({"class":"E","decision":"retry","retry_at":-1})"}, error));
}

TEST_CASE("the app's own settings in ready", "[runner_protocol]") {
    std::string error;
    auto ready = parse_ready(
        {"ready",
         R"({"pid":1,"app":{"max_retries":0,"dead_max_jobs":3,"dead_timeout_in_seconds":60}})"},
        error);
    REQUIRE(ready);
    CHECK(ready->app.max_retries == 0);
    CHECK(ready->app.dead_max_jobs == 3);
    CHECK(ready->app.dead_timeout_seconds == 60);
    // A value that is not a whole number in range is left out; the greeting still counts.
    auto odd = parse_ready(
        {"ready",
         R"({"pid":1,"app":{"max_retries":-1,"dead_max_jobs":0,"dead_timeout_in_seconds":"9"}})"},
        error);
    REQUIRE(odd);
    CHECK(odd->app.empty());
    auto none = parse_ready({"ready", R"({"pid":1})"}, error);
    REQUIRE(none);
    CHECK(none->app.empty());
}

TEST_CASE("throttled: the app's throttling handed the job back", "[runner_protocol]") {
    std::string error;
    auto rest = parse_reply({"throttled", R"({"rest":1.5})"}, error);
    REQUIRE(rest);
    CHECK(rest->throttled);
    CHECK(rest->rest_seconds == 1.5);
    CHECK_FALSE(rest->awaits_written());
    auto plain = parse_reply({"throttled", "{}"}, error);
    REQUIRE(plain);
    CHECK(plain->throttled);
    CHECK(plain->rest_seconds == 0);
    // A rest that is not one (negative, over an hour, not a number) is ignored.
    for (const char* data : {R"({"rest":-1})", R"({"rest":7200})", R"({"rest":"1"})"}) {
        auto odd = parse_reply({"throttled", data}, error);
        REQUIRE(odd);
        CHECK(odd->rest_seconds == 0);
    }
    CHECK_FALSE(parse_reply({"throttled", "not json"}, error));
    CHECK_FALSE(parse_reply({"later", "{}"}, error));
    CHECK(error == "an unexpected 'later' frame instead of done, fail or throttled");
}

TEST_CASE("the app's gems that change Sidekiq's fetch, in ready", "[runner_protocol]") {
    std::string error;
    auto ready = parse_ready({"ready", R"({"pid":1,"app":{"fetch_patches":[
            {"target":"Sidekiq::BasicFetch","module":"Sidekiq::Throttled::Patches::BasicFetch",
             "gem":"sidekiq-throttled","honoured":true},
            {"target":"Sidekiq::Manager","module":"Sidekiq::Manager::InitLimitFetch",
             "gem":"sidekiq-limit_fetch"},
            {"target":"Sidekiq::Manager"}]}})"},
                             error);
    REQUIRE(ready);
    REQUIRE(ready->app.fetch_patches.size() == 2);
    CHECK(ready->app.fetch_patches[0].honoured);
    CHECK(ready->app.fetch_patches[1].gem == "sidekiq-limit_fetch");
    CHECK_FALSE(ready->app.fetch_patches[1].honoured);
}

TEST_CASE("the app's capsules and job classes in ready", "[runner_protocol]") {
    std::string error;
    auto ready = parse_ready({"ready", R"({"pid":1,"app":{
            "capsules":[{"name":"single","concurrency":1,"queues":[["single",0]]},
                        {"name":"bulk","concurrency":2,"queues":[["bulk",3],["bulk_low",1]]},
                        {"name":"odd","concurrency":"2","queues":[["x",1]]},
                        {"name":"odd2","concurrency":2,"queues":["x"]}],
            "classes":[{"class":"IndexJob","queue":"search","urgency":"high",
                        "resource_boundary":"cpu","feature_category":"global_search",
                        "idempotent":true,"external_dependencies":false,"tags":["a",1,"b"]},
                       {"class":"PlainJob","queue":"mail"},
                       {"class":"","queue":"x"},{"queue":"y"}]}})"},
                             error);
    REQUIRE(ready);
    // Entries not of the expected shape are left out.
    REQUIRE(ready->app.capsules.size() == 2);
    CHECK(ready->app.capsules[0].name == "single");
    CHECK(ready->app.capsules[0].concurrency == 1);
    CHECK(ready->app.capsules[1].queues ==
          std::vector<std::pair<std::string, long long>>{{"bulk", 3}, {"bulk_low", 1}});
    REQUIRE(ready->app.classes.size() == 2);
    const auto& index = ready->app.classes[0];
    CHECK(index.name == "IndexJob");
    CHECK(index.queue == "search");
    CHECK(index.attributes.at("urgency") == "high");
    CHECK(index.attributes.at("resource_boundary") == "cpu");
    CHECK(index.attributes.at("feature_category") == "global_search");
    CHECK(index.idempotent == true);
    CHECK(index.external_dependencies == false);
    CHECK(index.tags == std::vector<std::string>{"a", "b"});
    CHECK(index.has_metadata());
    CHECK(ready->app.classes[1].queue == "mail");
    CHECK_FALSE(ready->app.classes[1].has_metadata());
    CHECK_FALSE(ready->app.empty());
}

TEST_CASE("the tagged dialect: tags on the type line, threads in ready, kill and discard",
          "[runner_protocol]") {
    const std::string wire = encode_frame("job", "{\"jid\":\"a\"}", 7) +
                             encode_frame("done", "{}", 4294967295u) + encode_frame("quiet", "{}");
    CHECK(wire.substr(4, 6) == "job 7\n");
    FrameReader reader;
    reader.feed(wire.data(), wire.size());
    auto job = reader.next();
    REQUIRE(job);
    CHECK(job->type == "job");
    CHECK(job->tag == 7);
    CHECK(job->data == "{\"jid\":\"a\"}");
    auto done = reader.next();
    REQUIRE(done);
    CHECK(done->type == "done");
    CHECK(done->tag == 4294967295u);
    auto quiet = reader.next();
    REQUIRE(quiet);
    CHECK(quiet->tag == 0);

    for (const char* bad : {"done 0\n{}", "done 4294967296\n{}", "done 07\n{}", "done x\n{}",
                            "done \n{}", "done 1 2\n{}"}) {
        INFO(bad);
        FrameReader r;
        const std::string body = bad;
        const std::string frame = std::string{0, 0, 0, static_cast<char>(body.size())} + body;
        r.feed(frame.data(), frame.size());
        CHECK_FALSE(r.next());
        CHECK(r.error() == "a frame whose tag is not a number from 1 to 4294967295");
    }

    std::string error;
    auto ready = parse_ready({"ready", R"({"pid":1,"runner":"r","threads":12})"}, error);
    REQUIRE(ready);
    CHECK(ready->threads == 12);
    auto plain = parse_ready({"ready", R"({"pid":1})"}, error);
    REQUIRE(plain);
    CHECK(plain->threads == 0);
    for (const char* bad :
         {R"({"threads":0})", R"({"threads":1025})", R"({"threads":"4"})", R"({"threads":2.5})"}) {
        INFO(bad);
        CHECK_FALSE(parse_ready({"ready", bad}, error));
        CHECK(error == "a ready frame whose \"threads\" is not a whole number from 1 to 1024");
    }

    auto kill = parse_reply({"fail", R"({"class":"E","retry_in":"kill"})"}, error);
    REQUIRE(kill);
    CHECK(kill->give_up == GiveUp::kill);
    CHECK_FALSE(kill->retry_in);
    auto discard = parse_reply({"fail", R"({"class":"E","retry_in":"discard"})"}, error);
    REQUIRE(discard);
    CHECK(discard->give_up == GiveUp::discard);
    auto other = parse_reply({"fail", R"({"class":"E","retry_in":"later"})"}, error);
    REQUIRE(other);
    CHECK(other->give_up == GiveUp::no);
}
