// Process names as key parts: the host name or $DYNO is encoded in the identity so that the
// separators key names and lock owners are split on cannot occur in it; lock owners are split
// at their last space; relative plugin paths are resolved beside the config file.
#include <catch2/catch.hpp>
#include <regex>

#include "kiqd/clock.hpp"
#include "kiqd/config.hpp"
#include "middleware/unique/lock_keeper.hpp"
#include "server/process_identity.hpp"

using kiqd::encode_host_name;

TEST_CASE("host names: ordinary ones unchanged, every other byte percent-encoded", "[names]") {
    CHECK(encode_host_name("web-1.example.com") == "web-1.example.com");
    CHECK(encode_host_name("worker.3") == "worker.3");
    CHECK(encode_host_name("Ab_9") == "Ab_9");
    CHECK(encode_host_name("web|1") == "web%7C1");
    CHECK(encode_host_name("web 1") == "web%201");
    CHECK(encode_host_name("web:1") == "web%3A1");
    CHECK(encode_host_name("web\n1") == "web%0A1");
    CHECK(encode_host_name("w\xc3\xab") == "w%C3%AB");
    CHECK(encode_host_name("100%") == "100%25");  // '%' itself: decoding stays unambiguous
    CHECK(encode_host_name("*?[x]") == "%2A%3F%5Bx%5D");
    CHECK(encode_host_name("") == "localhost");
    CHECK(encode_host_name(std::string(300, 'a')) == std::string(255, 'a'));
    // Whatever the input, none of the separators survive.
    std::string every_byte;
    for (int c = 1; c < 256; ++c) every_byte += static_cast<char>(c);
    const std::string encoded = encode_host_name(every_byte.substr(0, 255));
    CHECK(encoded.find_first_of("| :\n\r\t*?[]{}\"'\\") == std::string::npos);
}

TEST_CASE("the identity of a process carries its name encoded", "[names]") {
    ::setenv("DYNO", "web 1|x", 1);
    const auto me = kiqd::ProcessIdentity::create();
    ::unsetenv("DYNO");
    CHECK(me.hostname == "web%201%7Cx");
    CHECK(me.identity == "web%201%7Cx:" + std::to_string(me.pid) + ":" + me.nonce);
}

TEST_CASE("lock owners: a new owner is '<identity> <16 hex>@<seconds>.<3 digits>', taken now",
          "[names][unique]") {
    const double before = kiqd::epoch_seconds();
    const std::string owner = kiqd::LockKeeper::new_owner("host:1:abc");
    const double after = kiqd::epoch_seconds();
    CHECK(std::regex_match(owner, std::regex(R"(host:1:abc [0-9a-f]{16}@[0-9]+\.[0-9]{3})")));
    CHECK(kiqd::LockKeeper::owner_identity(owner) == "host:1:abc");
    const auto since = kiqd::LockKeeper::owner_since(owner);
    REQUIRE(since);
    CHECK(*since >= before - 0.0005);  // rounded to the millisecond
    CHECK(*since <= after + 0.0005);
    CHECK(kiqd::LockKeeper::new_owner("host:1:abc") != owner);
}

TEST_CASE("lock owners: the identity is everything before the last space", "[names][unique]") {
    CHECK(kiqd::LockKeeper::owner_identity("host:1:abc 0123456789abcdef") == "host:1:abc");
    // Another client's identity with a space is still read whole.
    CHECK(kiqd::LockKeeper::owner_identity("my host:1:abc 0123") == "my host:1:abc");
    CHECK(kiqd::LockKeeper::owner_identity("bare") == "bare");
}

TEST_CASE("plugins: relative paths are resolved beside the config file", "[config][plugin]") {
    const auto c = kiqd::parse_config("plugins: [lib/jobs.so, jobs2.so, /opt/x/jobs3.so]\n",
                                      "/etc/kiqd/kiqd.yml", "production");
    REQUIRE(c.plugins.size() == 3);
    CHECK(c.plugins[0].path == "/etc/kiqd/lib/jobs.so");
    CHECK(c.plugins[1].path == "/etc/kiqd/jobs2.so");
    CHECK(c.plugins[2].path == "/opt/x/jobs3.so");
    const auto root = kiqd::parse_config("plugins: [jobs.so]\n", "/kiqd.yml", "production");
    CHECK(root.plugins[0].path == "/jobs.so");
}
