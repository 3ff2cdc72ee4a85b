// compat: auto's reading of the cluster: the Sidekiq major of info JSONs shaped exactly as
// Sidekiq 6.4.1, 7.3 and 8.0 write them (launcher.rb, to_data), and the decision taken from them.
#include "server/cluster_compat.hpp"

#include <catch2/catch.hpp>

using kiqd::ClusterCompat;
using kiqd::sidekiq_major_of_info;

namespace {

// Sidekiq 6.4.1: no version, weights or embedded.
const char* kInfo641 = R"({"hostname":"web-1","started_at":1795312740.2113,"pid":4242,"tag":"app",)"
                       R"("concurrency":10,"queues":["critical","default"],"labels":[],)"
                       R"("identity":"web-1:4242:0f1e2d3c4b5a"})";
// Sidekiq 7.3.10: + weights (one hash per capsule), version, embedded.
const char* kInfo73 =
    R"({"hostname":"web-2","started_at":1795312741.5,"pid":77,"tag":"app","concurrency":5,)"
    R"("queues":["critical","default"],"weights":[{"critical":3,"default":1}],"labels":[],)"
    R"("identity":"web-2:77:a1b2c3d4e5f6","version":"7.3.10","embedded":false})";
// Sidekiq 8.0.8: + capsules (name → {concurrency, mode, weights}), queues and weights kept.
const char* kInfo80 =
    R"({"hostname":"web-3","started_at":1795312742.25,"pid":88,"tag":"","concurrency":5,)"
    R"("capsules":{"default":{"concurrency":5,"mode":"weighted","weights":{"critical":3,)"
    R"("default":1}}},"queues":["critical","default"],"weights":[{"critical":3,"default":1}],)"
    R"("labels":[],"identity":"web-3:88:0a0b0c0d0e0f","version":"8.0.8","embedded":false})";

}  // namespace

TEST_CASE("compat auto: the Sidekiq major of each version's info JSON", "[compat]") {
    CHECK(sidekiq_major_of_info(kInfo641) == 6);
    CHECK(sidekiq_major_of_info(kInfo73) == 7);
    CHECK(sidekiq_major_of_info(kInfo80) == 8);
    CHECK(sidekiq_major_of_info(R"({"version":"10.0.0.beta1"})") == 10);
    // kiqd's own versions carry no Sidekiq major; neither does anything that is not an object.
    CHECK_FALSE(sidekiq_major_of_info(R"({"version":"kiqd-0.1.0"})"));
    CHECK_FALSE(sidekiq_major_of_info(R"({"version":7})"));
    CHECK_FALSE(sidekiq_major_of_info(R"({"version":"7"})"));
    CHECK_FALSE(sidekiq_major_of_info("[1,2]"));
    CHECK_FALSE(sidekiq_major_of_info("{not json"));
    CHECK_FALSE(sidekiq_major_of_info(""));
    CHECK_FALSE(sidekiq_major_of_info(std::string(70000, ' ') + "{}"));
}

TEST_CASE("compat auto: the highest major decides; metrics in each major's layout", "[compat]") {
    // Alone or beside 6.x only, the Web UI reading the metrics may be 7 or 8: both layouts.
    const auto alone = ClusterCompat::from_majors({});
    CHECK(alone.major == 6);
    CHECK(alone.metrics.v7);
    CHECK(alone.metrics.v8);
    const auto six = ClusterCompat::from_majors({6, 6});
    CHECK(six.major == 6);
    CHECK(six.metrics.v7);
    CHECK(six.metrics.v8);
    CHECK(ClusterCompat::from_majors({5}).metrics.v7);
    const auto mixed67 = ClusterCompat::from_majors({6, 7});
    CHECK(mixed67.major == 7);
    CHECK(mixed67.metrics.v7);
    CHECK_FALSE(mixed67.metrics.v8);
    const auto mixed78 = ClusterCompat::from_majors({7, 8, 8});
    CHECK(mixed78.major == 8);
    CHECK(mixed78.metrics.v7);
    CHECK(mixed78.metrics.v8);
    CHECK(ClusterCompat::from_majors({5}).major == 6);
    CHECK(ClusterCompat::from_majors({9}).major == 8);
    CHECK(ClusterCompat::from_majors({9}).metrics.v8);
    // An explicit compat is fixed, whatever runs around it.
    CHECK(ClusterCompat::fixed(kiqd::Compat::v6).major == 6);
    CHECK_FALSE(ClusterCompat::fixed(kiqd::Compat::v6).metrics.any());
    CHECK(ClusterCompat::fixed(kiqd::Compat::v7).metrics.v7);
    CHECK_FALSE(ClusterCompat::fixed(kiqd::Compat::v7).metrics.v8);
    CHECK(ClusterCompat::fixed(kiqd::Compat::v8).metrics.v8);
    CHECK_FALSE(ClusterCompat::fixed(kiqd::Compat::v8).metrics.v7);
}
