// unique digests [unique][digest][gems]: for payloads without a `lock_digest` (pushed by producers
// other than sidekiq-unique-jobs), kiqd computes the lock's digest itself, and it must be the one
// the gem computes for the same job (LockDigest: MD5 of Ruby's JSON.generate of the sorted
// apartment/class/lock_args/queue pairs), or a kiqd lock and a gem lock on the same job would
// not exclude each other. Compared with the real gem's code (7.1.33 on Debian's Sidekiq 6.4.1,
// 8.1.0 on Sidekiq 7.3.10), loaded from ../shared/gems beside the project; skipped with a
// message where that folder is absent.
#include <catch2/catch.hpp>
#include <filesystem>
#include <sstream>

#include "middleware/unique/unique_jobs.hpp"
#include "support/job_of.hpp"
#include "support/kiqd_process.hpp"
#include "support/temp_dir.hpp"

namespace fs = std::filesystem;
using kiqd::test::run_command;
using kiqd::test::TempDir;

namespace {

// Each payload names its queue "default" (job_of's queue) and asks for a lock.
const std::vector<std::string> kPayloads = {
    R"({"class":"C","queue":"default","args":[1,"two",3.5]})",
    R"({"class":"C","queue":"default","args":[1e20,1e-7,1.0,100,0.0001,0.00001]})",
    R"({"class":"C","queue":"default","args":[18446744073709551616,-9223372036854775809,-0,-0.0]})",
    R"({"class":"C","queue":"default","args":[123456789012345.0,1234567890123456.0,0.1,2.5e-5]})",
    R"({"class":"C","queue":"default","args":[5e-324,1.7976931348623157e308,1E2,12.50e0]})",
    R"({"class":"C","queue":"default","args":[{"b":1,"a":[true,false,null]}]})",
    R"({"class":"C","queue":"default","args":["\u00e9\u001f\/\"\\\n\t\b\f\r","\ud83d\ude00 ü \u2028"]})",
    R"({"class":"C","queue":"default","args":[ 1 , { "k" : "v" } ]})",
    R"({"class":"C","queue":"default","args":["x"],"apartment":"tenant-1"})",
    R"({"class":"C","queue":"default","args":["x"],"apartment":null})",
    R"({"class":"C","queue":"default","args":["x"],"lock_args":[{"id":7}]})",
    R"({"class":"C","queue":"default","args":[1],"unique_across_queues":true})",
    R"({"class":"C","queue":"default","args":[1],"unique_across_workers":true})",
    R"({"class":"Mailer::Deliver","queue":"default","args":[],"lock_prefix":"myapp"})",
};

// The gem's digest of each payload, as its client middleware would compute it: lock_args are
// the job's own, else its args (no lock_args_method), and lock_prefix defaults to uniquejobs.
std::vector<std::string> gem_digests(const std::vector<std::string>& include_dirs,
                                     const std::vector<std::string>& requires_,
                                     bool modern = false) {
    TempDir dir;
    std::string lines;
    for (const auto& p : kPayloads) lines += p + "\n";
    const std::string input = dir.write("payloads.jsonl", lines);
    const std::string script = dir.write("digest.rb", std::string(R"(
require "json"
)") + (modern ? "SidekiqUniqueJobs.config.digest_algorithm = :modern\n" : "") +
                                                          R"(
File.readlines(ARGV[0]).each do |line|
  item = JSON.parse(line)
  item["lock_args"] = item["args"] unless item.key?("lock_args")
  item["lock_prefix"] ||= "uniquejobs"
  puts SidekiqUniqueJobs::LockDigest.call(item)
end
)");
    std::vector<std::string> argv{"/usr/bin/ruby"};
    for (const auto& d : include_dirs) argv.push_back("-I" + d);
    for (const auto& r : requires_) argv.push_back("-r" + r);
    argv.push_back(script);
    argv.push_back(input);
    auto [status, out] = run_command(argv);
    INFO(out);
    REQUIRE(status == 0);
    std::vector<std::string> digests;
    std::istringstream in(out);
    for (std::string line; std::getline(in, line);)
        if (line.find(':') != std::string::npos && line.find(' ') == std::string::npos)
            digests.push_back(line);
    return digests;
}

void compare_with(const std::vector<std::string>& gem, bool modern = false) {
    REQUIRE(gem.size() == kPayloads.size());
    kiqd::UniqueJobsConfig cfg;
    cfg.modern_digest = modern;
    for (size_t i = 0; i < kPayloads.size(); ++i) {
        std::string payload = kPayloads[i];
        payload.insert(payload.size() - 1, R"(,"lock":"while_executing")");
        INFO(payload);
        auto lock = kiqd::resolve_lock(kiqd::test::job_of(payload), nullptr, cfg);
        REQUIRE(lock);
        CHECK(lock->digest == gem[i]);
    }
}

}  // namespace

TEST_CASE("unique: kiqd's own digest is the sidekiq-unique-jobs gem's LockDigest",
          "[unique][digest][gems]") {
    const fs::path gems = fs::path(KIQD_SOURCE_DIR) / ".." / "shared" / "gems";
    if (!fs::exists(gems / "sidekiq-unique-jobs-7.1.33")) {
        WARN("skipped: the real gems are not at " + gems.string());
        return;
    }
    SECTION("sidekiq-unique-jobs 7.1.33 on Debian's Sidekiq 6.4.1") {
        compare_with(gem_digests({(gems / "sidekiq-unique-jobs-7.1.33/lib").string(),
                                  (gems / "brpoplpush-redis_script-0.1.3/lib").string()},
                                 {"sidekiq", "sidekiq_unique_jobs"}));
    }
    SECTION("sidekiq-unique-jobs 8.1.0 on Sidekiq 7.3.10") {
        compare_with(gem_digests(
            {(gems / "sidekiq-7.3.10/lib").string(), (gems / "redis-client-0.26.4/lib").string(),
             (gems / "connection_pool-2.5.5/lib").string(),
             (gems / "sidekiq-unique-jobs-8.1.0/lib").string(),
             (gems / "brpoplpush-redis_script-0.1.3/lib").string()},
            {"sidekiq", "sidekiq_unique_jobs"}));
    }
    SECTION("sidekiq-unique-jobs 8.1.0, digest_algorithm: :modern (SHA3-256)") {
        compare_with(gem_digests({(gems / "sidekiq-7.3.10/lib").string(),
                                  (gems / "redis-client-0.26.4/lib").string(),
                                  (gems / "connection_pool-2.5.5/lib").string(),
                                  (gems / "sidekiq-unique-jobs-8.1.0/lib").string(),
                                  (gems / "brpoplpush-redis_script-0.1.3/lib").string()},
                                 {"sidekiq", "sidekiq_unique_jobs"}, true),
                     true);
    }
}
