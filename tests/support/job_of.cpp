#include "support/job_of.hpp"

#include <catch2/catch.hpp>

namespace kiqd::test {

Job job_of(const std::string& raw, const std::string& queue) {
    auto parsed = parse_job(raw, queue);
    REQUIRE(std::holds_alternative<Job>(parsed));
    return std::get<Job>(parsed);
}

}  // namespace kiqd::test
