// The draw behind basic and batched fetch (prefix_fetch.hpp) against Sidekiq's rule: a fetch
// takes from the first non-empty queue of `queues.shuffle.uniq` over the weight-expanded list.
// With every queue non-empty, queue q comes first with probability w(q)/Σw; with some empty,
// the first non-empty one is q with probability w(q)/Σ over the non-empty ones (checked here by
// enumerating Sidekiq's shuffles for a small case). The draw only sees the non-empty queues.
#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <set>

#include "fetch/prefix_fetch.hpp"

using kiqd::PrefixFetch;
using kiqd::QueueOrder;

namespace {

// Sidekiq's share for each queue of `weights` when only `non_empty` have jobs, by enumerating
// every distinct permutation of the expanded list (each equally likely under a uniform shuffle).
std::map<size_t, double> sidekiq_shares(const std::vector<int>& weights,
                                        const std::vector<bool>& non_empty) {
    std::vector<size_t> expanded;
    for (size_t q = 0; q < weights.size(); ++q)
        for (int i = 0; i < weights[q]; ++i) expanded.push_back(q);
    std::sort(expanded.begin(), expanded.end());
    std::map<size_t, double> count;
    double total = 0;
    do {
        // Multiset permutations are equally likely too: each stands for the same number of
        // permutations of distinguishable copies.
        for (size_t q : expanded) {
            if (!non_empty[q]) continue;
            count[q] += 1;
            break;
        }
        total += 1;
    } while (std::next_permutation(expanded.begin(), expanded.end()));
    for (auto& [q, c] : count) c /= total;
    return count;
}

}  // namespace

TEST_CASE("Sidekiq's first non-empty queue is drawn by weight among the non-empty ones",
          "[fetch][weights]") {
    const std::vector<int> weights{3, 2, 1, 1, 2};
    const std::vector<bool> non_empty{false, true, true, false, true};
    const auto shares = sidekiq_shares(weights, non_empty);
    // Σ weights of the non-empty queues: 2 + 1 + 2 = 5.
    CHECK(shares.at(1) == Approx(2.0 / 5).epsilon(1e-12));
    CHECK(shares.at(2) == Approx(1.0 / 5).epsilon(1e-12));
    CHECK(shares.at(4) == Approx(2.0 / 5).epsilon(1e-12));
    CHECK(shares.count(0) == 0);
}

TEST_CASE("500 queues of weights 1-3: each weight class's share within 2 % of Sidekiq's",
          "[fetch][weights]") {
    std::vector<kiqd::QueueWeight> queues;
    for (int i = 0; i < 500; ++i) queues.push_back({"q" + std::to_string(i), i % 3 + 1});
    QueueOrder order(queues);
    PrefixFetch fetch(order, std::vector<std::string>(500, "unused"));
    std::vector<size_t> candidates;
    fetch.candidates(candidates);
    REQUIRE(candidates.size() == 500);
    std::vector<long long> sums;
    fetch.candidate_sums(candidates, sums);
    // All non-empty: class w gets (number of queues of weight w) × w / Σw.
    std::map<int, double> expected;
    double total = 0;
    for (int i = 0; i < 500; ++i) {
        expected[i % 3 + 1] += i % 3 + 1;
        total += i % 3 + 1;
    }
    for (auto& [w, e] : expected) e /= total;
    std::mt19937_64 rng(20261128);
    std::vector<size_t> drawn;
    std::map<int, long> first;
    std::vector<long> per_queue(500);
    constexpr long kDraws = 300000;
    for (long i = 0; i < kDraws; ++i) {
        fetch.draw(rng, candidates, sums, PrefixFetch::kWidth, drawn);
        REQUIRE(drawn.size() == PrefixFetch::kWidth);
        REQUIRE(std::set<size_t>(drawn.begin(), drawn.end()).size() == drawn.size());  // distinct
        ++first[order.weight(drawn[0])];
        ++per_queue[drawn[0]];
    }
    // Relative to the expected share (weight 1: 16.7 %, so ±0.33 points); the standard
    // deviation over 300,000 draws is under 0.5 % of it: 2 % is over 4 of them.
    for (const auto& [w, e] : expected) {
        const double share = static_cast<double>(first[w]) / kDraws;
        INFO("weight " << w << ": share " << share << ", Sidekiq " << e);
        CHECK(std::abs(share - e) / e < 0.02);
    }
    // No queue is starved: each came first in some draws (expected 300 to 900 each).
    CHECK(*std::min_element(per_queue.begin(), per_queue.end()) > 100);
}

TEST_CASE("the draw leaves out queues known empty and paused ones", "[fetch][weights]") {
    QueueOrder order({{"a", 0}, {"b", 0}, {"c", 0}});
    order.set_paused({"b"});
    PrefixFetch fetch(order, {"queue:a", "queue:b", "queue:c"});
    std::vector<size_t> candidates;
    fetch.candidates(candidates);
    CHECK(candidates == std::vector<size_t>{0, 2});
    std::vector<long long> sums;
    fetch.candidate_sums(candidates, sums);
    std::mt19937_64 rng(1);
    std::vector<size_t> drawn;
    fetch.draw(rng, candidates, sums, candidates.size(), drawn);
    CHECK(drawn == std::vector<size_t>{0, 2});  // strict: configuration order
}
