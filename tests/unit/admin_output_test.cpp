// Unit [admin]: which configuration file the operator commands read (config_source.hpp), how
// they name the Redis they read, and the time cells of their tables (table.hpp).
#include <catch2/catch.hpp>

#include "admin/config_source.hpp"
#include "admin/table.hpp"
#include "support/temp_dir.hpp"

using kiqd::admin::choose_admin_config;
using kiqd::admin::redis_source;

TEST_CASE("admin config: -C, then $KIQD_CONFIG, then the system file when it exists",
          "[admin][unit]") {
    kiqd::test::TempDir dir;
    const auto system = dir.write("kiqd.yml", "concurrency: 1\n");
    const auto missing = dir.file("absent.yml");
    CHECK(choose_admin_config("a.yml", "b.yml", system).path == "a.yml");
    CHECK(choose_admin_config("a.yml", "b.yml", system).how == "-C");
    CHECK(choose_admin_config("", "b.yml", system).path == "b.yml");
    CHECK(choose_admin_config("", "b.yml", system).how == "KIQD_CONFIG");
    CHECK(choose_admin_config("", "", system).path == system);  // empty = unset
    CHECK(choose_admin_config("", nullptr, system).how == "default");
    CHECK(choose_admin_config("", nullptr, missing).path.empty());
    // $KIQD_CONFIG is taken as given even when missing: the load names the file.
    CHECK(choose_admin_config("", missing.c_str(), system).path == missing);
}

TEST_CASE("admin config: the words naming where the Redis URL came from", "[admin][unit]") {
    const kiqd::admin::ConfigChoice none, c{"/x.yml", "-C"}, sys{"/etc/kiqd/kiqd.yml", "default"};
    CHECK(redis_source(std::string("redis://h"), c, true, "redis://e") == "--redis-url");
    CHECK(redis_source(std::nullopt, c, true, "redis://e") == "/x.yml (-C)");
    CHECK(redis_source(std::nullopt, sys, true, nullptr) == "/etc/kiqd/kiqd.yml");
    CHECK(redis_source(std::nullopt, c, false, "redis://e") ==
          "REDIS_URL, /x.yml (-C) has no redis.url");
    CHECK(redis_source(std::nullopt, none, false, "redis://e") == "REDIS_URL");
    CHECK(redis_source(std::nullopt, none, false, "") == "default");
    CHECK(redis_source(std::nullopt, sys, false, nullptr) ==
          "default, /etc/kiqd/kiqd.yml has no redis.url");
}

TEST_CASE("admin tables: times are ISO 8601 with a relative time that reads right",
          "[admin][unit]") {
    using kiqd::admin::time_cell;
    const double now = 1795312800.0;  // 2026-11-22T02:00:00Z
    CHECK(time_cell(now + 300, now) == "2026-11-22T02:05:00Z (in 5.0 min)");
    CHECK(time_cell(now - 90, now) == "2026-11-22T01:58:30Z (1.5 min ago)");
    // Due entries whose time has passed wait for the scheduler: overdue, never "in -3 s".
    CHECK(time_cell(now - 3, now, true) == "2026-11-22T01:59:57Z (overdue 3.00 s)");
    CHECK(time_cell(now + 3, now, true) == "2026-11-22T02:00:03Z (in 3.00 s)");
    kiqd::admin::ojson j;
    kiqd::admin::put_time(j, "at", now);
    CHECK(j.dump() == R"({"at":1795312800.0,"at_iso":"2026-11-22T02:00:00Z"})");
}

TEST_CASE("admin tables: --no-headers leaves the rows, aligned as with the header",
          "[admin][unit]") {
    std::ostringstream with, without;
    kiqd::admin::print_table(with, {"NAME", "SIZE"}, {{"a", "1"}, {"bb", "22"}});
    kiqd::admin::print_table(without, {"NAME", "SIZE"}, {{"a", "1"}, {"bb", "22"}}, false);
    CHECK(with.str() == "NAME  SIZE\na     1\nbb    22\n");
    CHECK(without.str() == "a     1\nbb    22\n");
}
