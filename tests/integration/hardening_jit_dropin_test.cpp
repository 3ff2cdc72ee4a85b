// Hardening [hardening][systemd]: MemoryDenyWriteExecute=yes in the units is inherited by every
// exec handler's command, and a JIT runtime (node, java, ruby --yjit) cannot run under it. The
// package ships a drop-in that turns it off (systemd/kiqd.service.d/jit-handlers.conf.example,
// installed as /usr/share/doc/kiqd/examples/jit-handlers.conf): applied to both units it must
// verify cleanly (no unknown key, no warning), take effect, and keep the exposure rating.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <regex>

#include "support/kiqd_process.hpp"
#include "support/temp_dir.hpp"

using kiqd::test::read_file;
using kiqd::test::TempDir;

TEST_CASE("systemd: the JIT drop-in turns MemoryDenyWriteExecute off and verifies cleanly",
          "[hardening][systemd]") {
    const std::string analyze = "/usr/bin/systemd-analyze";
    if (::access(analyze.c_str(), X_OK) != 0) {
        WARN("systemd-analyze not installed: skipped (apt-get install systemd)");
        return;
    }
    const std::string dropin =
        read_file(KIQD_SOURCE_DIR "/systemd/kiqd.service.d/jit-handlers.conf.example");
    REQUIRE_FALSE(dropin.empty());
    const TempDir dir("kiqd-units");
    for (const std::string unit : {"kiqd.service", "kiqd@.service"}) {
        const std::string text = read_file(KIQD_SOURCE_DIR "/systemd/" + unit);
        REQUIRE_FALSE(text.empty());
        // verify checks that ExecStart exists: point it at the binary under test.
        dir.write(unit, std::regex_replace(text, std::regex("/usr/bin/kiqd"), KIQD_BINARY));
        std::filesystem::create_directory(dir.file(unit + ".d"));
        dir.write(unit + ".d/jit-handlers.conf", dropin);
    }
    // Run in the units' directory, where systemd-analyze finds them and their drop-ins.
    auto analyze_in_dir = [&](const std::string& args) {
        return kiqd::test::run_command(
            {"/bin/sh", "-c", "cd '" + dir.path() + "' && exec " + analyze + " " + args});
    };
    auto [code, out] = analyze_in_dir("verify kiqd.service kiqd@.service kiqd@1.service");
    INFO(out);
    CHECK(code == 0);
    CHECK(out.empty());
    for (const std::string unit : {"kiqd.service", "kiqd@1.service"}) {
        auto [scode, sout] = analyze_in_dir("security --offline=true --threshold=20 " + unit);
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
