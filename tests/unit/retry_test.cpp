#include <catch2/catch.hpp>
#include <set>

#include "job/backtrace_codec.hpp"
#include "job/job_retry.hpp"
#include "support/job_of.hpp"

using namespace kiqd;
using kiqd::test::job_of;

namespace {

struct Fixture {
    Keys keys;
    DeadSet dead{keys, 10000, 15552000, Compat::v6};
    JobRetry retry{Compat::v6, 25, keys, dead};
    std::mt19937_64 rng{42};
    Failure failure{"RuntimeError", "boom", {"a.rb:1", "b.rb:2", "c.rb:3"}};
};

}  // namespace

TEST_CASE("retry delay is count^4 + 15 + rand(10)*(count+1)", "[retry]") {
    std::mt19937_64 rng(1);
    for (long long count : {0LL, 1LL, 5LL, 24LL}) {
        std::set<long long> seen;
        for (int i = 0; i < 500; ++i) {
            long long d = JobRetry::delay_seconds(count, Compat::v6, rng);
            const long long base = count * count * count * count + 15;
            REQUIRE(d >= base);
            REQUIRE(d <= base + 9 * (count + 1));
            REQUIRE((d - base) % (count + 1) == 0);
            seen.insert(d);
        }
        CHECK(seen.size() == 10);  // all ten jitter steps occur
    }
    for (int i = 0; i < 200; ++i) {  // 8.x: uniform integer in [0, 10*(count+1) - 1]
        long long d = JobRetry::delay_seconds(2, Compat::v8, rng);
        CHECK(d >= 31);
        CHECK(d <= 31 + 29);
    }
}

TEST_CASE("first failure: Sidekiq's fields are added, everything else kept byte for byte",
          "[retry]") {
    Fixture f;
    // Odd but valid formatting and unknown fields, as other tools may write them.
    const std::string raw =
        R"({"class":"HardWorker","args":[1,{"queue":"nested"}],"retry":true,"queue":"default",)"
        R"("jid":"abc","created_at":1795312741.335896,"enqueued_at":1.7953127413360791E9,)"
        R"("x_custom":{"deep":[1.50,"caf\u00e9"]},"bid":"B-1"})";
    auto plan = f.retry.plan(job_of(raw), f.failure, 1795312800.5, f.rng);
    REQUIRE(plan.outcome == FailureOutcome::Retried);
    CHECK_THAT(plan.payload, Catch::Contains(R"("args":[1,{"queue":"nested"}])"));
    CHECK_THAT(plan.payload, Catch::Contains(R"("enqueued_at":1.7953127413360791E9)"));
    CHECK_THAT(plan.payload, Catch::Contains(R"("x_custom":{"deep":[1.50,"caf\u00e9"]})"));
    CHECK_THAT(plan.payload, Catch::Contains(R"("bid":"B-1")"));
    auto p = nlohmann::json::parse(plan.payload);
    CHECK(p["retry_count"] == 0);
    CHECK(p["failed_at"].is_number_float());
    CHECK(p["error_class"] == "RuntimeError");
    CHECK(p["error_message"] == "boom");
    CHECK_FALSE(p.contains("error_backtrace"));  // "backtrace" not set
    CHECK_FALSE(p.contains("retried_at"));
    CHECK(plan.score >= 1795312800.5 + 15);
    CHECK(plan.score <= 1795312800.5 + 24);
}

TEST_CASE("later failures bump retry_count and set retried_at", "[retry]") {
    Fixture f;
    auto plan = f.retry.plan(
        job_of(R"({"class":"W","args":[],"retry_count":3,"failed_at":1.5,"queue":"q"})", "q"),
        f.failure, 1000.0, f.rng);
    auto p = nlohmann::json::parse(plan.payload);
    CHECK(p["retry_count"] == 4);
    CHECK(p["failed_at"] == 1.5);
    CHECK(p.contains("retried_at"));
    CHECK(plan.score >= 1000 + 256 + 15);
}

TEST_CASE("retry: false, 0, N, dead: false, retry_queue, backtrace", "[retry]") {
    Fixture f;
    CHECK(f.retry.plan(job_of(R"({"class":"W","retry":false})"), f.failure, 1, f.rng).outcome ==
          FailureOutcome::Discarded);
    CHECK(f.retry.plan(job_of(R"({"class":"W","retry":null})"), f.failure, 1, f.rng).outcome ==
          FailureOutcome::Discarded);
    CHECK(f.retry.plan(job_of(R"({"class":"W","retry":0})"), f.failure, 1, f.rng).outcome ==
          FailureOutcome::Dead);
    CHECK(f.retry.plan(job_of(R"({"class":"W","retry":2,"retry_count":0})"), f.failure, 1, f.rng)
              .outcome == FailureOutcome::Retried);
    CHECK(f.retry.plan(job_of(R"({"class":"W","retry":2,"retry_count":1})"), f.failure, 1, f.rng)
              .outcome == FailureOutcome::Dead);
    CHECK(f.retry.plan(job_of(R"({"class":"W","retry_count":24})"), f.failure, 1, f.rng).outcome ==
          FailureOutcome::Dead);  // default max 25
    CHECK(f.retry.plan(job_of(R"({"class":"W","retry":0,"dead":false})"), f.failure, 1, f.rng)
              .outcome == FailureOutcome::Discarded);

    auto rq = f.retry.plan(job_of(R"({"class":"W","retry_queue":"slow"})"), f.failure, 1, f.rng);
    CHECK(nlohmann::json::parse(rq.payload)["queue"] == "slow");

    auto bt = f.retry.plan(job_of(R"({"class":"W","backtrace":2})"), f.failure, 1, f.rng);
    auto lines = decode_backtrace(nlohmann::json::parse(bt.payload)["error_backtrace"]);
    REQUIRE(lines);
    CHECK(*lines == std::vector<std::string>{"a.rb:1", "b.rb:2"});
    auto all = f.retry.plan(job_of(R"({"class":"W","backtrace":true})"), f.failure, 1, f.rng);
    CHECK(decode_backtrace(nlohmann::json::parse(all.payload)["error_backtrace"])->size() == 3);
}

TEST_CASE("retry_for: retried until failed_at + retry_for", "[retry]") {
    Fixture f;
    CHECK(f.retry
              .plan(job_of(R"({"class":"W","retry_for":60,"failed_at":100.0,"retry_count":0})"),
                    f.failure, 150, f.rng)
              .outcome == FailureOutcome::Retried);
    CHECK(f.retry
              .plan(job_of(R"({"class":"W","retry_for":60,"failed_at":100.0,"retry_count":0})"),
                    f.failure, 161, f.rng)
              .outcome == FailureOutcome::Dead);
}

TEST_CASE("error messages are cut at 10,000 characters and kept valid UTF-8", "[retry]") {
    Fixture f;
    f.failure.message = std::string(12000, 'x') + "\xff";
    auto plan = f.retry.plan(job_of(R"({"class":"W"})"), f.failure, 1, f.rng);
    auto msg = nlohmann::json::parse(plan.payload)["error_message"].get<std::string>();
    CHECK(msg.size() == 10000);
    CHECK(truncate_utf8("h\xc3\xa9llo", 2) == "h\xc3\xa9");
}

TEST_CASE("8.x compat writes integer millisecond timestamps", "[retry]") {
    Keys keys;
    DeadSet dead{keys, 10000, 100, Compat::v8};
    JobRetry retry{Compat::v8, 25, keys, dead};
    std::mt19937_64 rng(1);
    auto plan = retry.plan(job_of(R"({"class":"W"})"), {"E", "m", {}}, 1795312800.25, rng);
    CHECK(nlohmann::json::parse(plan.payload)["failed_at"] == 1795312800250LL);
}

TEST_CASE("a job class's kill and discard (Sidekiq 7's sidekiq_retry_in :kill, :discard)",
          "[retry]") {
    Fixture f;
    f.failure.give_up = Failure::GiveUp::kill;
    auto killed = f.retry.plan(job_of(R"({"class":"W","retry":5})"), f.failure, 1, f.rng);
    CHECK(killed.outcome == FailureOutcome::Dead);
    CHECK(killed.exhausted);  // sidekiq_retries_exhausted and the death handlers run
    auto kept =
        f.retry.plan(job_of(R"({"class":"W","retry":5,"dead":false})"), f.failure, 1, f.rng);
    CHECK(kept.outcome == FailureOutcome::Discarded);
    CHECK(kept.exhausted);
    f.failure.give_up = Failure::GiveUp::discard;
    auto dropped = f.retry.plan(job_of(R"({"class":"W","retry":5})"), f.failure, 1, f.rng);
    CHECK(dropped.outcome == FailureOutcome::Discarded);
    CHECK_FALSE(dropped.exhausted);  // :discard runs no hook
    // retry: false wins over either: no retry, no morgue, as in Sidekiq, whose death handlers
    // still run (the exhausted hook, with the job as it was).
    f.failure.give_up = Failure::GiveUp::kill;
    const std::string raw = R"({"class":"W","retry":false})";
    auto off = f.retry.plan(job_of(raw), f.failure, 1, f.rng);
    CHECK(off.outcome == FailureOutcome::Discarded);
    CHECK(off.exhausted);
    CHECK(off.payload == raw);
}

TEST_CASE("a runner's retry decision is followed, not made again", "[retry]") {
    Fixture f;
    // A retry at the runner's time, though the count would have it dead here (retry: 1,
    // retry_count 5: the app's JobRetry decided with its own limits).
    f.failure.decision = Failure::Decision::retry;
    f.failure.retry_at = 1234.5;
    auto retried = f.retry.plan(job_of(R"({"class":"W","retry":1,"retry_count":5,"x":[1.50]})"),
                                f.failure, 1000, f.rng);
    CHECK(retried.outcome == FailureOutcome::Retried);
    CHECK(retried.score == 1234.5);
    CHECK_FALSE(retried.exhausted);
    CHECK(retried.payload.find(R"("retry_count":6)") != std::string::npos);
    CHECK(retried.payload.find(R"("x":[1.50])") != std::string::npos);  // the rest byte for byte
    // Dead, though retries are left; no exhausted hook (the runner ran Sidekiq's).
    f.failure.decision = Failure::Decision::dead;
    auto dead = f.retry.plan(job_of(R"({"class":"W","retry":25})"), f.failure, 1000, f.rng);
    CHECK(dead.outcome == FailureOutcome::Dead);
    CHECK(dead.score == 1000);
    CHECK_FALSE(dead.exhausted);
    CHECK(dead.payload.find(R"("error_class":"RuntimeError")") != std::string::npos);
    // Discard: nothing to write, whatever the payload says.
    f.failure.decision = Failure::Decision::discard;
    auto gone = f.retry.plan(job_of(R"({"class":"W","retry":25})"), f.failure, 1000, f.rng);
    CHECK(gone.outcome == FailureOutcome::Discarded);
    CHECK_FALSE(gone.exhausted);
    CHECK(f.retry.commands(gone).empty());
}
