// Fuzz target: a fetched payload's whole path — json_scan, parse_job, the tree, RawJsonObject,
// the retry entry of a failure and the dead entry — against the promises in
// job_path_invariants.hpp: one verdict from every reader, a retry entry that keeps class, args,
// jid and every member it does not own, a dead entry that keeps a refused payload's original
// bytes. A broken promise, a crash, a sanitizer report, an exception or (the tree is built with
// _GLIBCXX_ASSERTIONS) an empty optional dereferenced aborts the run. Seeds:
// corpus/job_path/ (byte-order marks, NUL bytes and other inputs where the parsers once
// disagreed).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "job_path_invariants.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    // A small size limit so that short inputs reach PayloadTooLarge too.
    static const kiqd::JobLimits limits{8192, 256};
    const std::string raw(reinterpret_cast<const char*>(data), size);
    std::string broken;
    try {
        broken = kiqd::job_path::check_job_path(raw, limits);
    } catch (const std::exception& e) {
        broken = std::string("unexpected exception: ") + e.what();
    }
    if (!broken.empty()) {
        std::fprintf(stderr, "fuzz_job_path: promise broken: %s\n", broken.c_str());
        std::abort();
    }
    return 0;
}
