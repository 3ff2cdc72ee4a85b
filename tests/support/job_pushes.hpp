#pragma once
// Pushing jobs for tests: raw payloads as any Sidekiq producer writes them (LPUSH, SADD queues),
// many jobs through kiqd's Client in bulk, and the smallest runnable payload.
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kiqd/redis/connection.hpp"

namespace kiqd::test {

// SADDs `queue` to `queues` and LPUSHes the payload strings unchanged, in batches of 500.
void push_raw(redis::Connection& c, const std::string& queue, const std::vector<std::string>& raws);

// Pushes the jobs `job(0)` … `job(n - 1)` with a plain Client (Sidekiq 6 format, no middleware),
// in bulk pipelines of 1,000; returns their jids in that order.
std::vector<std::string> push_jobs(redis::Connection& c, int n,
                                   const std::function<nlohmann::ordered_json(int)>& job);
// `n` copies of `job`.
std::vector<std::string> push_copies(redis::Connection& c, const nlohmann::ordered_json& job,
                                     int n);

// A Kiqd::Noop payload for queue `default` with this jid, as Sidekiq's client writes one.
std::string noop_payload(const std::string& jid);

}  // namespace kiqd::test
