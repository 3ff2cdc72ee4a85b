#include "fetch/queue_order.hpp"

#include <catch2/catch.hpp>
#include <map>

using kiqd::QueueOrder;

TEST_CASE("strict order is the configured order, every time", "[fetch]") {
    QueueOrder order({{"critical", 0}, {"default", 0}, {"low", 0}});
    std::mt19937_64 rng(1);
    std::vector<const std::string*> out;
    for (int i = 0; i < 100; ++i) {
        order.order(rng, out);
        REQUIRE(out.size() == 3);
        CHECK(*out[0] == "critical");
        CHECK(*out[1] == "default");
        CHECK(*out[2] == "low");
    }
}

TEST_CASE("weighted 6/3/1: the first queue asked matches 60/30/10 within 2 points", "[fetch]") {
    QueueOrder order({{"critical", 6}, {"default", 3}, {"low", 1}});
    CHECK_FALSE(order.strict());
    std::mt19937_64 rng(20261122);
    std::vector<const std::string*> out;
    std::map<std::string, int> first;
    const int n = 10000;
    for (int i = 0; i < n; ++i) {
        order.order(rng, out);
        REQUIRE(out.size() == 3);  // every queue is always asked: no starvation
        first[*out[0]]++;
    }
    CHECK(std::abs(first["critical"] * 100.0 / n - 60) < 2);
    CHECK(std::abs(first["default"] * 100.0 / n - 30) < 2);
    CHECK(std::abs(first["low"] * 100.0 / n - 10) < 2);
}

TEST_CASE("a mix of weighted and plain queues is weighted, plain counting as 1", "[fetch]") {
    QueueOrder order({{"a", 3}, {"b", 0}});
    CHECK_FALSE(order.strict());
    std::mt19937_64 rng(7);
    std::vector<const std::string*> out;
    int a_first = 0;
    for (int i = 0; i < 4000; ++i) {
        order.order(rng, out);
        a_first += *out[0] == "a";
    }
    CHECK(std::abs(a_first / 4000.0 - 0.75) < 0.03);
    CHECK(order.names() == std::vector<std::string>{"a", "b"});
}
