// Fuzz target: the configuration loader (expand_erb → YAML → parse_config → validate_config).
// The contract: a text either yields a valid Config or a ConfigError naming a key (non-empty);
// any other exception type, a crash or a sanitizer report is a bug and aborts.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "kiqd/config.hpp"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    // ERB lookups read the environment: give them something to find, and a fixed REDIS_URL.
    setenv("KIQD_FUZZ_URL", "redis://127.0.0.1:6379/1", 1);
    setenv("KIQD_FUZZ_N", "7", 1);
    setenv("REDIS_URL", "redis://127.0.0.1:6379/0", 1);
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::string text(reinterpret_cast<const char*>(data), size);
    // Alternate environments by input length so that both paths (none, production) get fuzzed.
    const std::string environment = size % 2 ? "production" : "";
    try {
        kiqd::Config c = kiqd::parse_config(text, "fuzz.yml", environment);
        kiqd::validate_config(c);
        if (c.queues.empty() || c.concurrency < 1) {
            std::fprintf(stderr, "fuzz_config: validate_config accepted an invalid config\n");
            std::abort();
        }
    } catch (const kiqd::ConfigError& e) {
        if (e.key().empty() || std::string(e.what()).empty()) {
            std::fprintf(stderr, "fuzz_config: ConfigError without a key: %s\n", e.what());
            std::abort();
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "fuzz_config: exception other than ConfigError: %s\n", e.what());
        std::abort();
    } catch (...) {
        std::fprintf(stderr, "fuzz_config: non-std exception\n");
        std::abort();
    }
    return 0;
}
