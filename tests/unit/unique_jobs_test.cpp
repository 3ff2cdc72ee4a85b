// Unique-job options and identities: the digest matches what Ruby's sidekiq-unique-jobs
// computes (the constant below was produced by Ruby 3.1 with Sidekiq.dump_json and
// Digest::MD5 over the same item), payload options win over YAML defaults, and bad values fail
// clearly.
#include "middleware/unique/unique_jobs.hpp"

#include <catch2/catch.hpp>

#include "middleware/unique/ruby_json.hpp"
#include "support/config_errors.hpp"
#include "support/job_of.hpp"

using namespace kiqd;
using kiqd::test::job_of;

namespace {

ClassSpec class_with(LockDefaults lock) {
    return ClassSpec{"HardWorker", std::move(lock), 1};
}

}  // namespace

TEST_CASE("unique: the digest is sidekiq-unique-jobs' legacy MD5 digest", "[unique]") {
    // ruby -rjson -rdigest -rsidekiq -e 'h = {"class"=>"HardWorker","queue"=>"default",
    //   "lock_args"=>[1,"two",{"x"=>3.5}]}; puts Digest::MD5.hexdigest(Sidekiq.dump_json(h.sort))'
    auto job =
        job_of(R"({"class":"HardWorker","queue":"default","args":[1,"two",{"x":3.5}],"jid":"j1"})");
    UniqueJobsConfig cfg;
    auto cls = class_with({"until_and_while_executing", {}, {}, {}, ""});
    auto lock = resolve_lock(job, &cls, cfg);
    REQUIRE(lock);
    CHECK(lock->digest == "uniquejobs:51379b77797b663b731d77364b7dde75");
    CHECK_FALSE(lock->client_lock);
    // Object keys keep the producer's order (Ruby hashes do), they are not sorted.
    auto a = resolve_lock(
        job_of(R"({"class":"C","args":[{"b":1,"a":2}],"lock":"while_executing"})"), nullptr, cfg);
    auto b = resolve_lock(
        job_of(R"({"class":"C","args":[{"a":2,"b":1}],"lock":"while_executing"})"), nullptr, cfg);
    CHECK(a->digest != b->digest);
    // Picked arguments (a class's lock_args) are read alone, in the producer's key order; an
    // index past the end is nil.
    auto picking = class_with({"while_executing", std::vector<int>{0, 5}, {}, {}, ""});
    auto picked =
        resolve_lock(job_of(R"({"class":"C","args":[{"b":1,"a":2},[3,{"z":0}]]})"), &picking, cfg);
    const std::string cls_name = "C", queue = "default";
    CHECK(picked->digest ==
          unique_digest("uniquejobs", &cls_name, &queue, R"([{"b":1,"a":2},null])"));
    // unique_across_queues / unique_across_workers leave queue / class out.
    auto q1 =
        job_of(R"({"class":"C","args":[1],"lock":"while_executing","unique_across_queues":true})");
    auto q2 = q1;
    q2.queue = "other";
    CHECK(resolve_lock(q1, nullptr, cfg)->digest == resolve_lock(q2, nullptr, cfg)->digest);
}

// unique_digest reuses one digest context per thread: MD5 and SHA3-256 in turn on one thread
// must each give the same digest as on their own (values from the two tests above and below).
TEST_CASE("unique: digests alternating between MD5 and SHA3-256 on one thread stay exact",
          "[unique][digest]") {
    const std::string hard = "HardWorker", c = "C", queue = "default";
    const std::string md5 = "uniquejobs:51379b77797b663b731d77364b7dde75";
    const std::string sha3 =
        "uniquejobs:e6f180f2e1d0cb41147546d95dc47565c015556630d8cf758eeb5895137e58d7";
    for (int i = 0; i < 3; ++i) {
        CHECK(unique_digest("uniquejobs", &hard, &queue, R"([1,"two",{"x":3.5}])") == md5);
        CHECK(unique_digest("uniquejobs", &c, &queue, "[1]", std::nullopt, true) == sha3);
    }
}

// The lock options read from the Job's member index ("at", "lock_limit" included) are the
// same as read by a pass over the payload.
TEST_CASE("unique: at and lock_limit are read from the payload", "[unique]") {
    UniqueJobsConfig cfg;
    auto lock = resolve_lock(
        job_of(
            R"({"class":"C","queue":"default","args":[1],"lock":"until_executed","lock_limit":3,"at":1700000000.5})"),
        nullptr, cfg);
    REQUIRE(lock);
    CHECK(lock->limit == 3);
    CHECK(lock->score == "1700000000.5");
}

TEST_CASE("unique: payload options, YAML defaults and the lock types' defaults", "[unique]") {
    UniqueJobsConfig cfg;
    CHECK_FALSE(resolve_lock(job_of(R"({"class":"C","args":[]})"), nullptr, cfg));

    // A producer's lock_digest is the identity, and marks a client lock to release.
    auto ruby = resolve_lock(job_of(R"({"class":"C","args":[1],"lock":"until_executed",
        "lock_digest":"uniquejobs:abc","lock_ttl":30})"),
                             nullptr, cfg);
    CHECK(ruby->type == "until_executed");
    CHECK(ruby->digest == "uniquejobs:abc");
    CHECK(ruby->client_lock);
    CHECK(ruby->ttl == std::chrono::seconds(30));

    // Aliases, and each type's defaults.
    auto busy =
        resolve_lock(job_of(R"({"class":"C","args":[],"lock":"while_busy"})"), nullptr, cfg);
    CHECK(busy->type == "while_executing");
    CHECK(busy->timeout == std::chrono::milliseconds(0));
    CHECK(busy->on_conflict == "reject");
    auto two = resolve_lock(job_of(R"({"class":"C","args":[],"lock":"until_and_while_executing"})"),
                            nullptr, cfg);
    CHECK_FALSE(two->timeout);  // waits as long as it takes
    CHECK(two->on_conflict == "log");
    CHECK(two->ttl == cfg.default_lock_ttl);
    auto server = resolve_lock(job_of(R"({"class":"C","args":[],"lock":"while_executing",
        "on_conflict":{"client":"log","server":"reschedule"},"lock_timeout":2})"),
                               nullptr, cfg);
    CHECK(server->on_conflict == "reschedule");
    CHECK(server->timeout == std::chrono::seconds(2));

    // YAML defaults: lock_args picks argument indexes; the payload wins where it speaks.
    auto cls = class_with({"until_and_while_executing", std::vector<int>{1},
                           std::chrono::seconds(9), std::chrono::seconds(4), "reject"});
    auto d1 = resolve_lock(job_of(R"({"class":"HardWorker","args":[1,"acct-7"]})"), &cls, cfg);
    auto d2 = resolve_lock(job_of(R"({"class":"HardWorker","args":[2,"acct-7"]})"), &cls, cfg);
    CHECK(d1->digest == d2->digest);  // only args[1] makes the identity
    CHECK(d1->ttl == std::chrono::seconds(9));
    CHECK(d1->timeout == std::chrono::seconds(4));
    CHECK(d1->on_conflict == "reject");
    auto own = resolve_lock(job_of(R"({"class":"HardWorker","args":[1,"acct-7"],
        "lock":"until_expired","lock_args":["x"]})"),
                            &cls, cfg);
    CHECK(own->type == "until_expired");
    CHECK(own->digest != d1->digest);

    CHECK_THROWS_AS(
        resolve_lock(job_of(R"({"class":"C","args":[],"lock":"forever"})"), nullptr, cfg),
        JobError);
    CHECK_THROWS_AS(resolve_lock(job_of(R"({"class":"C","args":[],"lock":"while_executing",
        "lock_ttl":"long"})"),
                                 nullptr, cfg),
                    JobError);
}

TEST_CASE("unique: YAML lock options are validated with the key and the line", "[unique][config]") {
    auto error_of = [](const std::string& yaml) {
        return kiqd::test::config_error_of(yaml, validate_config);
    };
    auto c = parse_config(
        "queues: [a]\nhandlers:\n  Sync:\n    lock: while_busy\n    lock_args: [0, 2]\n"
        "    lock_ttl: 120\n    on_conflict: reschedule\nunique_jobs: {reaper_interval: 5}\n",
        "t.yml", "production");
    REQUIRE(c.classes.count("Sync"));
    CHECK(c.classes["Sync"].lock.lock == "while_executing");
    CHECK(*c.classes["Sync"].lock.lock_args == std::vector<int>{0, 2});
    CHECK(c.classes["Sync"].lock.lock_ttl == std::chrono::seconds(120));
    CHECK(c.classes["Sync"].lock.on_conflict == "reschedule");
    CHECK(c.exec_handlers.empty());
    CHECK(c.unique_jobs.reaper_interval == std::chrono::seconds(5));

    CHECK(error_of("queues: [a]\nhandlers:\n  S:\n    lock: forever\n") ==
          "handlers.S.lock (line 4): must be until_and_while_executing, while_executing, "
          "until_executing, until_executed or until_expired");
    CHECK(
        error_of("queues: [a]\nhandlers:\n  S:\n    lock: until_executed\n    on_conflict: x\n") ==
        "handlers.S.on_conflict (line 5): must be reject, reschedule or log");
    CHECK(error_of("queues: [a]\nhandlers:\n  S:\n    lock_ttl: 5\n") ==
          "handlers.S.lock (line 3): is required with lock_args/lock_ttl/lock_timeout/on_conflict");
    CHECK(
        error_of("queues: [a]\nhandlers:\n  S:\n    lock: until_executed\n    lock_args: [-1]\n") ==
        "handlers.S.lock_args (line 5): indexes must not be negative");
    CHECK(error_of("queues: [a]\nunique_jobs: {reaper: 5}\n") ==
          "unique_jobs.reaper (line 2): unknown key");
    CHECK(error_of("queues: [a]\nunique_jobs:\n  digest_algorithm: sha1\n") ==
          "unique_jobs.digest_algorithm (line 3): must be legacy or modern");
    CHECK_FALSE(c.unique_jobs.modern_digest);
    CHECK(parse_config("unique_jobs: {digest_algorithm: modern}\n", "t.yml", "production")
              .unique_jobs.modern_digest);
}

TEST_CASE("unique: digest_algorithm modern is SHA3-256 of the same text", "[unique][digest]") {
    // ruby -ropenssl -e 'puts OpenSSL::Digest.new("SHA3-256",
    //   %q([["class","C"],["lock_args",[1]],["queue","default"]])).hexdigest'
    // — the gem 8's :modern digest of {class C, queue default, args [1]}
    const std::string expected =
        "uniquejobs:e6f180f2e1d0cb41147546d95dc47565c015556630d8cf758eeb5895137e58d7";
    const std::string cls = "C", queue = "default";
    CHECK(unique_digest("uniquejobs", &cls, &queue, "[1]", std::nullopt, true) == expected);
    UniqueJobsConfig cfg;
    cfg.modern_digest = true;
    auto lock = resolve_lock(
        job_of(R"({"class":"C","queue":"default","args":[1],"lock":"until_executed"})"), nullptr,
        cfg);
    REQUIRE(lock);
    CHECK(lock->digest == expected);
}

TEST_CASE("unique: a huge lock_ttl is an invalid lock, not an overflow", "[unique][fuzz]") {
    auto job = job_of(R"({"class":"C","args":[],"lock":"while_executing","lock_ttl":1e300})");
    CHECK_THROWS_AS(resolve_lock(job, nullptr, UniqueJobsConfig{}), JobError);
}

TEST_CASE("unique: JSON written as Ruby's JSON.generate writes it", "[unique][digest]") {
    using kiqd::ruby_json;
    CHECK(ruby_json(R"( [ 1e20 , -1.5E-7 , 100 , 1e2 , -0 , 0.1 ] )") ==
          "[1.0e+20,-1.5e-07,100,100.0,0,0.1]");
    CHECK(ruby_json(R"({"b":[],"a":{}})") == R"({"b":[],"a":{}})");
    CHECK(ruby_json(R"("\u0041\/\u001F\ud83d\ude00")") == "\"A/\\u001f\xF0\x9F\x98\x80\"");
    CHECK(kiqd::ruby_float_text(1e15) == "1.0e+15");
    CHECK(kiqd::ruby_float_text(123456789012345.0) == "123456789012345.0");
    CHECK(kiqd::ruby_float_text(0.0001) == "0.0001");
    // The json gem 2.15+ (3.1.0 wrote exactly these).
    CHECK(ruby_json("[1e20,-1.5e-7,100.0,1e2,0.1,1e15,123456789012345.0,1234567890123456.0,"
                    "0.0001,1e-7,2.5e-5,5e-324,1.7976931348623157e308,12.5,1e-10,1.5e-10,"
                    "0.000001234,-0.0,3.0e14,1e16,123.456e-9,9007199254740993.0,0.3]",
                    kiqd::JsonFloats::json_2_15) ==
          "[1e+20,-0.00000015,100.0,100.0,0.1,1e+15,123456789012345.0,1.234567890123456e+15,"
          "0.0001,0.0000001,0.000025,5e-324,1.7976931348623157e+308,12.5,1e-10,1.5e-10,"
          "0.000001234,-0.0,300000000000000.0,1e+16,0.000000123456,9.007199254740992e+15,0.3]");
    // What Ruby cannot write is refused, not guessed at.
    CHECK_THROWS_AS(ruby_json("[1e400]"), std::invalid_argument);
    CHECK_THROWS_AS(ruby_json(R"("\ud800")"), std::invalid_argument);
    CHECK_THROWS_AS(ruby_json("[1,]"), std::invalid_argument);
    CHECK_THROWS_AS(ruby_json(std::string(300, '[') + std::string(300, ']')),
                    std::invalid_argument);
}
