// unique digests [unique][digest][gems]: for payloads without a `lock_digest` (pushed by producers
// other than sidekiq-unique-jobs), kiqd computes the lock's digest itself, and it must be the one
// the gem computes for the same job (LockDigest: MD5 of Ruby's JSON.generate of the sorted
// apartment/class/lock_args/queue pairs), or a kiqd lock and a gem lock on the same job would
// not exclude each other. Compared with the real gem's code, run in the test worlds through
// scripts/world (tests/gemfiles/): 7.1.33 on Sidekiq 6.4.1 (sidekiq64), 8.1.0 on Sidekiq 7.3.10
// (sidekiq73) and on Sidekiq 8.1.7 (sidekiq81, Ruby 3.3). A world that is not installed fails
// the test, naming it and `bash scripts/install-gems WORLD`.
//
// Ruby's JSON.generate is the json gem's, whose float output changed in json 2.11-2.15: a float
// that Float#to_s writes in scientific notation comes out as 1e+20, 0.0000001, 0.000025, 5e-324
// (json <= 2.10: 1.0e+20, 1.0e-07, 2.5e-05, 5.0e-324, as kiqd writes them). The sidekiq73
// world runs Ruby 3.1's json 2.6.1; the sidekiq64 and sidekiq81 bundles carry json 3.1.0, where
// the payloads with such floats get other digests from the gem than from kiqd: those checks fail
// there, a real difference this test keeps visible (the gem's output names its json version).
#include <catch2/catch.hpp>
#include <sstream>

#include "middleware/unique/unique_jobs.hpp"
#include "support/job_of.hpp"
#include "support/kiqd_process.hpp"
#include "support/temp_dir.hpp"

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

const std::string kWorldScript = std::string(KIQD_SOURCE_DIR) + "/scripts/world";

// Fails unless `world` is installed with sidekiq-unique-jobs `gem_version` on Sidekiq
// `sidekiq_version`.
void require_world(const std::string& world, const std::string& sidekiq_version,
                   const std::string& gem_version) {
    // The requires in the script, not as -r flags: those would run before RUBYOPT's
    // bundler/setup, outside the world's bundle.
    auto [status, out] = run_command({kWorldScript, world, "ruby", "-e",
                                      R"(require "sidekiq"; require "sidekiq_unique_jobs"
            puts "versions #{Sidekiq::VERSION} #{SidekiqUniqueJobs::VERSION}")"});
    INFO(out);
    if (status != 0)
        FAIL("the " + world + " world does not load Sidekiq and sidekiq-unique-jobs (not " +
             "installed?): run `bash scripts/install-gems " + world + "`");
    REQUIRE(out.find("versions " + sidekiq_version + " " + gem_version + "\n") !=
            std::string::npos);
}

// The gem's digest of each payload, as its client middleware would compute it, in `world`:
// lock_args are the job's own, else its args (no lock_args_method), and lock_prefix defaults to
// uniquejobs. `json` gets the line naming the world's json gem.
std::vector<std::string> gem_digests(const std::string& world, bool modern, std::string& json) {
    TempDir dir;
    std::string lines;
    for (const auto& p : kPayloads) lines += p + "\n";
    const std::string input = dir.write("payloads.jsonl", lines);
    const std::string script = dir.write("digest.rb", std::string(R"(
require "json"
require "sidekiq"
require "sidekiq_unique_jobs"
)") + (modern ? "SidekiqUniqueJobs.config.digest_algorithm = :modern\n" : "") +
                                                          R"(
puts "json #{JSON::VERSION}: its generator writes the floats the digest hashes"
File.readlines(ARGV[0]).each do |line|
  item = JSON.parse(line)
  item["lock_args"] = item["args"] unless item.key?("lock_args")
  item["lock_prefix"] ||= "uniquejobs"
  puts SidekiqUniqueJobs::LockDigest.call(item)
end
)");
    auto [status, out] = run_command({kWorldScript, world, "ruby", script, input});
    INFO(out);
    REQUIRE(status == 0);
    std::vector<std::string> digests;
    std::istringstream in(out);
    for (std::string line; std::getline(in, line);) {
        if (line.rfind("json ", 0) == 0) json = line;
        if (line.find(':') != std::string::npos && line.find(' ') == std::string::npos)
            digests.push_back(line);
    }
    return digests;
}

// kiqd's digest of each payload against the gem's in `world`.
void compare_in(const std::string& world, bool modern = false) {
    std::string json;
    const auto gem = gem_digests(world, modern, json);
    INFO(world << ": " << json);
    REQUIRE(gem.size() == kPayloads.size());
    kiqd::UniqueJobsConfig cfg;
    cfg.modern_digest = modern;
    // The world's json gem decides how the gem's digest writes floats: kiqd's digest_json says
    // which (json before 2.11: float_to_s; 2.15 and later: json_2_15).
    int major = 0, minor = 0;
    REQUIRE(std::sscanf(json.c_str(), "json %d.%d", &major, &minor) == 2);
    const bool new_floats = major > 2 || (major == 2 && minor >= 15);
    REQUIRE((new_floats || major < 2 || (major == 2 && minor < 11)));  // 2.11-2.14: neither
    cfg.json_2_15_floats = new_floats;
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
    SECTION("sidekiq-unique-jobs 7.1.33 on Sidekiq 6.4.1 (sidekiq64)") {
        require_world("sidekiq64", "6.4.1", "7.1.33");
        compare_in("sidekiq64");
    }
    SECTION("sidekiq-unique-jobs 8.1.0 on Sidekiq 7.3.10 (sidekiq73)") {
        require_world("sidekiq73", "7.3.10", "8.1.0");
        compare_in("sidekiq73");
    }
    SECTION("sidekiq-unique-jobs 8.1.0, digest_algorithm: :modern (SHA3-256), on 7.3.10") {
        require_world("sidekiq73", "7.3.10", "8.1.0");
        compare_in("sidekiq73", true);
    }
    SECTION("sidekiq-unique-jobs 8.1.0 on Sidekiq 8.1.7 (sidekiq81), legacy and modern") {
        require_world("sidekiq81", "8.1.7", "8.1.0");
        compare_in("sidekiq81");
        compare_in("sidekiq81", true);
    }
}
