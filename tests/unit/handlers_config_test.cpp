// `handlers:` (exec handlers) and `plugins:` in the YAML: shapes, defaults and strict errors.
#include <catch2/catch.hpp>
#include <filesystem>

#include "handlers/exec_handler.hpp"
#include "kiqd/config.hpp"
#include "support/config_errors.hpp"

using kiqd::ConfigError;
using kiqd::parse_config;

using kiqd::test::config_error_of;

TEST_CASE("handlers: exec commands with timeouts, plugins as paths", "[config][handlers]") {
    auto c = parse_config(R"(
queues: [default]
handlers:
  ResizeImage:
    exec: ["/usr/bin/python3", "/opt/jobs/resize.py"]
    timeout: 30
  "Admin::Report":
    exec: [report, --all]
    grace: 0.5
plugins:
  - /opt/kiqd/libmyjobs.so
  - ./libother.so
production:
  plugins: [/opt/prod.so]
)",
                          "test.yml", "development");
    REQUIRE(c.exec_handlers.size() == 2);
    CHECK(c.exec_handlers[0].job_class == "ResizeImage");
    CHECK(c.exec_handlers[0].argv ==
          std::vector<std::string>{"/usr/bin/python3", "/opt/jobs/resize.py"});
    CHECK(c.exec_handlers[0].timeout == std::chrono::milliseconds(30000));
    CHECK(c.exec_handlers[0].grace == std::chrono::milliseconds(5000));
    CHECK(c.exec_handlers[0].line == 4);
    CHECK(c.exec_handlers[1].job_class == "Admin::Report");
    CHECK_FALSE(c.exec_handlers[1].timeout.has_value());
    CHECK(c.exec_handlers[1].grace == std::chrono::milliseconds(500));
    REQUIRE(c.plugins.size() == 2);
    CHECK(c.plugins[0].path == "/opt/kiqd/libmyjobs.so");
    CHECK(c.plugins[0].line == 11);
    // Relative: beside the config file, here (text without a file) the working directory.
    CHECK(c.plugins[1].path == (std::filesystem::current_path() / "libother.so").string());

    auto prod = parse_config("plugins: [a.so]\nproduction:\n  plugins: [/opt/prod.so]\n",
                             "test.yml", "production");
    REQUIRE(prod.plugins.size() == 1);
    CHECK(prod.plugins[0].path == "/opt/prod.so");
}

TEST_CASE("handlers/plugins: bad shapes name the key and the line", "[config][handlers]") {
    CHECK(config_error_of("handlers: [a]\n") ==
          "handlers (line 1): must be a map of job class → {exec: [...], lock: ...}");
    CHECK(config_error_of("handlers:\n  A:\n    exec: []\n") ==
          "handlers.A.exec (line 3): must be a non-empty list: [command, args...] (no shell)");
    CHECK(config_error_of("handlers:\n  A:\n    exec: \"sh -c x\"\n") ==
          "handlers.A.exec (line 3): must be a non-empty list: [command, args...] (no shell)");
    CHECK(config_error_of("handlers:\n  A:\n    timeout: 3\n") ==
          "handlers.A.exec (line 3): is required with timeout/grace");
    CHECK(config_error_of("handlers:\n  A:\n    exec: [x]\n    timout: 3\n") ==
          "handlers.A.timout (line 4): unknown key");
    CHECK(config_error_of("handlers:\n  A:\n    exec: [x]\n    timeout: 0\n") ==
          "handlers.A.timeout (line 4): must be greater than 0");
    CHECK(config_error_of("handlers:\n  A:\n    exec: [x]\n    timeout: soon\n") ==
          "handlers.A.timeout (line 4): must be a number");
    CHECK(config_error_of("handlers:\n  A: /bin/true\n") ==
          "handlers.A (line 2): must be a map (exec:, lock:, ...)");
    CHECK(config_error_of("handlers:\n  A:\n    exec: [[x]]\n") ==
          "handlers.A.exec (line 3): must be a string");
    CHECK(config_error_of("plugins: lib.so\n") ==
          "plugins (line 1): must be a list of shared-object paths");
    CHECK(config_error_of("plugins: [{a: b}]\n") == "plugins[0] (line 1): must be a string");
    CHECK(config_error_of("plugins: [\"\"]\n") == "plugins[0] (line 1): empty path");
}

TEST_CASE("exec_command_problem finds commands like execvp does", "[handlers]") {
    kiqd::ExecHandlerSpec spec;
    spec.argv = {"/bin/true"};
    CHECK_FALSE(kiqd::exec_command_problem(spec));
    spec.argv = {"true"};
    CHECK_FALSE(kiqd::exec_command_problem(spec));
    spec.argv = {"/nonexistent/x"};
    CHECK(kiqd::exec_command_problem(spec) == "/nonexistent/x: No such file or directory");
    spec.argv = {"/etc"};
    CHECK(kiqd::exec_command_problem(spec) == "/etc: not a regular file");
    spec.argv = {"/etc/passwd"};
    CHECK(kiqd::exec_command_problem(spec) == "/etc/passwd: not executable");
    spec.argv = {"kiqd-no-such-command"};
    CHECK(kiqd::exec_command_problem(spec) == "kiqd-no-such-command: not found in PATH");
}
