#pragma once
// job_of: a payload parsed into a Job for unit tests that hand jobs to a component directly;
// the test fails (REQUIRE) when the payload is not a runnable job.
#include <string>

#include "kiqd/job.hpp"

namespace kiqd::test {

Job job_of(const std::string& raw, const std::string& queue = "default");

}  // namespace kiqd::test
