// docs/scaling.md's example, as shipped in examples/shards/: two kiqd instances on one host, each
// serving its own Redis (one per workload), run from the example configs unchanged. Each runs
// exactly its own Redis's jobs and registers there only.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "support/kiqd_process.hpp"
#include "support/redis_server.hpp"
#include "support/wait_until.hpp"

using kiqd::test::KiqdProcess;
using kiqd::test::RedisServer;
using kiqd::test::wait_until;

namespace {

const std::string kShards = std::string(KIQD_SOURCE_DIR) + "/examples/shards/";

void push_noop_jobs(RedisServer& server, const std::string& queue, int n) {
    auto conn = server.connect();
    for (int i = 0; i < n; ++i) {
        const nlohmann::json job{{"class", "Kiqd::Noop"},
                                 {"args", nlohmann::json::array({i})},
                                 {"jid", queue + std::to_string(i)},
                                 {"queue", queue}};
        conn.command({"LPUSH", "queue:" + queue, job.dump()});
        conn.command({"SADD", "queues", queue});
    }
}

long long processed_on(RedisServer& server) {
    auto reply = server.connect().command({"GET", "stat:processed"});
    return reply.is_nil() ? 0 : std::stoll(std::string(reply.str()));
}

}  // namespace

TEST_CASE("scaling: two kiqd instances serve two Redis servers from one host (examples/shards)",
          "[scaling]") {
    RedisServer orders_redis, mail_redis;
    push_noop_jobs(orders_redis, "orders", 30);
    push_noop_jobs(orders_redis, "payments", 10);
    push_noop_jobs(mail_redis, "mailers", 20);
    // A queue name both shards have: each instance works its own Redis's copy only.
    push_noop_jobs(mail_redis, "orders", 5);
    KiqdProcess orders(KIQD_BINARY, "", {"-C", kShards + "orders.yml"},
                       {{"ORDERS_REDIS_URL", orders_redis.url()}});
    KiqdProcess mail(KIQD_BINARY, "", {"-C", kShards + "mail.yml"},
                     {{"MAIL_REDIS_URL", mail_redis.url()}});
    REQUIRE(wait_until(
        [&] { return processed_on(orders_redis) == 40 && processed_on(mail_redis) == 20; },
        std::chrono::seconds(30)));
    auto mail_conn = mail_redis.connect();
    auto orders_conn = orders_redis.connect();
    // The mail shard's "orders" queue is not served by anyone: that shard's config lists none.
    CHECK(mail_conn.command({"LLEN", "queue:orders"}).integer() == 5);
    CHECK(orders_conn.command({"LLEN", "queue:orders"}).integer() == 0);
    // Each instance registered as a process in its own Redis only.
    CHECK(orders_conn.command({"SCARD", "processes"}).integer() == 1);
    CHECK(mail_conn.command({"SCARD", "processes"}).integer() == 1);
    CHECK(orders.stop() == 0);
    CHECK(mail.stop() == 0);
}
