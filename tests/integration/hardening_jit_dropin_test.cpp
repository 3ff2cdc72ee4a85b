// Hardening [hardening][systemd]: MemoryDenyWriteExecute=yes in the units is inherited by every
// exec handler's command, and a JIT runtime (node, java, ruby --yjit) cannot run under it. The
// package ships a drop-in that turns it off (systemd/kiqd.service.d/jit-handlers.conf.example,
// installed as /usr/share/doc/kiqd/examples/jit-handlers.conf): applied to both units it must
// verify cleanly (no unknown key, no warning), take effect, and keep the exposure rating.
#include <catch2/catch.hpp>
#include <filesystem>
#include <regex>

#include "support/staged_units.hpp"
#include "support/temp_dir.hpp"

using kiqd::test::read_file;
using kiqd::test::StagedUnits;

TEST_CASE("systemd: the JIT drop-in turns MemoryDenyWriteExecute off and verifies cleanly",
          "[hardening][systemd]") {
    if (!StagedUnits::analyze_available()) {
        WARN("systemd-analyze not installed: skipped (apt-get install systemd)");
        return;
    }
    const std::string dropin =
        read_file(KIQD_SOURCE_DIR "/systemd/kiqd.service.d/jit-handlers.conf.example");
    REQUIRE_FALSE(dropin.empty());
    const StagedUnits units(KIQD_SOURCE_DIR, KIQD_BINARY);
    for (const std::string unit : {"kiqd.service", "kiqd@.service"}) {
        std::filesystem::create_directory(units.dir().file(unit + ".d"));
        units.dir().write(unit + ".d/jit-handlers.conf", dropin);
    }
    auto [code, out] = units.analyze("verify kiqd.service kiqd@.service kiqd@1.service");
    INFO(out);
    CHECK(code == 0);
    CHECK(out.empty());
    for (const std::string unit : {"kiqd.service", "kiqd@1.service"}) {
        auto [scode, sout] = units.analyze("security --offline=true --threshold=20 " + unit);
        INFO(sout);
        CHECK(sout.find("Service may create writable executable memory mappings") !=
              std::string::npos);
        std::smatch m;
        REQUIRE(
            std::regex_search(sout, m, std::regex("Overall exposure level for \\S+: ([0-9.]+)")));
        CHECK(scode == 0);
        CHECK(std::stod(m[1]) <= 2.0);
    }
}
