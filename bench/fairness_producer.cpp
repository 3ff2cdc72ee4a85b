// The producer of bench/fairness.sh: pushes Test::Record jobs (kiqd_test_daemon) through kiqd's
// own client — make_process_client(), so the config's fair-tenant rules reroute at push time
// exactly as for any kiqd producer — in two phases:
//
//   kiqd_fairness_producer -C kiqd.yml greedy --jobs 20000 --job-ms 2
//       one tenant ("greedy") pushes its whole backlog at once (push_bulk, 1000 per pipeline);
//   kiqd_fairness_producer -C kiqd.yml small --tenants 20 --per-tenant 50 --job-ms 2
//       --spread-over 20000
//       20 small tenants ("small-00".."small-19") push 50 jobs each, one at a time, in a random
//       interleaving, spread evenly over the backlog: job k is pushed once
//       (k + 0.5) / total × 95 % of `spread-over` jobs have run (LLEN kiqd-test:ran), so they
//       arrive while the greedy backlog is being worked off, whatever the worker's speed.
//
// Every job is ["class": "Test::Record", "args": [job seconds, tenant]]; kiqd_test_daemon
// records its enqueued_at, start and end. Runs on the main thread only.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kiqd/client.hpp"
#include "kiqd/config.hpp"

namespace {

int usage() {
    std::cerr << "usage: kiqd_fairness_producer -C CONFIG greedy [--jobs N] [--job-ms MS]\n"
                 "       kiqd_fairness_producer -C CONFIG small [--tenants T] [--per-tenant M]"
                 " [--job-ms MS] [--spread-over N]\n";
    return 64;
}

}  // namespace

int main(int argc, char** argv) {
    std::string config_path, phase;
    long jobs = 20000, tenants = 20, per_tenant = 50, spread_over = 20000;
    double job_ms = 2;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
            return argv[++i];
        };
        try {
            if (a == "-C")
                config_path = value();
            else if (a == "--jobs")
                jobs = std::stol(value());
            else if (a == "--tenants")
                tenants = std::stol(value());
            else if (a == "--per-tenant")
                per_tenant = std::stol(value());
            else if (a == "--spread-over")
                spread_over = std::stol(value());
            else if (a == "--job-ms")
                job_ms = std::stod(value());
            else if (phase.empty() && (a == "greedy" || a == "small"))
                phase = a;
            else
                return usage();
        } catch (const std::exception& e) {
            std::cerr << "kiqd_fairness_producer: " << e.what() << "\n";
            return usage();
        }
    }
    if (config_path.empty() || phase.empty()) return usage();
    try {
        kiqd::Config config = kiqd::load_config_file(config_path, "development");
        if (config.queues.empty()) config.queues.push_back({"default", 0});
        kiqd::validate_config(config);
        const kiqd::Client client = kiqd::make_process_client(config);
        kiqd::redis::Connection conn(kiqd::redis::ConnectionOptions{
            config.redis.endpoint, config.redis.connect_timeout, std::chrono::milliseconds(5000),
            "", config.redis.sentinel});
        conn.connect();
        const double job_s = job_ms / 1000.0;
        auto job = [&](const std::string& tenant) {
            return nlohmann::ordered_json{{"class", "Test::Record"}, {"args", {job_s, tenant}}};
        };

        if (phase == "greedy") {
            for (long done = 0; done < jobs;) {
                std::vector<nlohmann::ordered_json> batch;
                for (; done < jobs && batch.size() < 1000; ++done) batch.push_back(job("greedy"));
                client.push_bulk(conn, std::move(batch));
            }
            return 0;
        }

        std::vector<std::string> order;
        for (long t = 0; t < tenants; ++t) {
            char name[32];
            std::snprintf(name, sizeof name, "small-%02ld", t);
            for (long j = 0; j < per_tenant; ++j) order.emplace_back(name);
        }
        std::mt19937 rng(7);  // the same interleaving in every run
        std::shuffle(order.begin(), order.end(), rng);
        const double span = 0.95 * static_cast<double>(spread_over);
        auto last_progress = std::chrono::steady_clock::now();
        long long last_ran = -1;
        for (size_t k = 0; k < order.size(); ++k) {
            const auto due = static_cast<long long>((static_cast<double>(k) + 0.5) /
                                                    static_cast<double>(order.size()) * span);
            for (;;) {
                const long long ran = conn.command({"LLEN", "kiqd-test:ran"}).integer();
                if (ran >= due) break;
                if (ran != last_ran) {
                    last_ran = ran;
                    last_progress = std::chrono::steady_clock::now();
                } else if (std::chrono::steady_clock::now() - last_progress >
                           std::chrono::seconds(60)) {
                    std::cerr << "kiqd_fairness_producer: no job ran for 60 s (" << ran << " of "
                              << due << ")\n";
                    return 1;
                }
                std::this_thread::sleep_for(std::chrono::microseconds(500));
            }
            client.push(conn, job(order[k]));
        }
        return 0;
    } catch (const kiqd::ConfigError& e) {
        std::cerr << "kiqd_fairness_producer: " << config_path << ": " << e.what() << "\n";
        return 78;
    } catch (const std::exception& e) {
        std::cerr << "kiqd_fairness_producer: " << e.what() << "\n";
        return 1;
    }
}
