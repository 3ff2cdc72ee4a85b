#pragma once
// Every Redis key name kiqd reads or writes, in one place (docs/data-model.md#key-inventory). An
// optional prefix reproduces redis-namespace deployments of Sidekiq 6 ("ns:queue:default").
// Immutable after construction; shared by all threads.
#include <string>
#include <string_view>

#include "kiqd/clock.hpp"

namespace kiqd {

class Keys {
  public:
    explicit Keys(std::string prefix = "") : prefix_(prefix.empty() ? "" : prefix + ":") {}

    std::string queue(std::string_view name) const {
        return prefix_ + "queue:" + std::string(name);
    }
    std::string queues() const { return prefix_ + "queues"; }
    // sidekiq-limit_fetch's keys: limit_fetch:{limit,process_limit,probed,busy,pause,block}:Q,
    // and its processes' heartbeats (limit:heartbeat:ID, set limit:processes).
    std::string limit_fetch(std::string_view kind, std::string_view queue) const {
        return prefix_ + "limit_fetch:" + std::string(kind) + ":" + std::string(queue);
    }
    std::string limit_heartbeat(std::string_view id) const {
        return prefix_ + "limit:heartbeat:" + std::string(id);
    }
    std::string limit_processes() const { return prefix_ + "limit:processes"; }
    std::string schedule() const { return prefix_ + "schedule"; }
    std::string retry() const { return prefix_ + "retry"; }
    std::string dead() const { return prefix_ + "dead"; }
    std::string processes() const { return prefix_ + "processes"; }
    std::string process(std::string_view identity) const { return prefix_ + std::string(identity); }
    // The busy-jobs hash: "<identity>:workers" up to Sidekiq 6.4, "<identity>:work" from 6.5.
    std::string work(std::string_view identity, Compat compat) const {
        return process(identity) + (compat == Compat::v6 ? ":workers" : ":work");
    }
    std::string signals(std::string_view identity) const { return process(identity) + "-signals"; }
    std::string stat(std::string_view name) const { return prefix_ + "stat:" + std::string(name); }
    std::string stat_daily(std::string_view name, std::string_view utc_date) const {
        return stat(name) + ":" + std::string(utc_date);
    }
    // Sidekiq 7/8's execution metrics (execution_metrics.hpp): the per-minute (and, in 8,
    // ten-minute) hash "j|<bucket>" and a class's histogram, named "<Class>-<window>" in 7 and
    // "h|<Class>-<window>" in 8 (`name` is that whole name).
    std::string metrics_hash(std::string_view bucket) const {
        return prefix_ + "j|" + std::string(bucket);
    }
    std::string metrics_histogram(std::string_view name) const {
        return prefix_ + std::string(name);
    }
    // Reliable fetch (docs/data-model.md#reliable-fetch-working-lists): a working list per process
    // and queue, named as Sidekiq Pro's super_fetch names its private queues, so tools that look
    // for in-flight jobs in "queue:*" lists (the sidekiq-unique-jobs reaper) see them.
    std::string working(std::string_view identity, std::string_view queue) const {
        return this->queue("sq|" + std::string(identity) + "|" + std::string(queue));
    }
    // The set of every working list, so orphan recovery never scans the keyspace.
    std::string working_lists() const { return prefix_ + "kiqd:reliable:working"; }
    // Exists while the process is alive (SET EX liveness_ttl, refreshed at a third of it).
    std::string alive(std::string_view identity) const {
        return prefix_ + "kiqd:reliable:alive:" + std::string(identity);
    }
    std::string recovery_lock() const { return prefix_ + "kiqd:reliable:recovery-lock"; }
    // HASH jid → how many times a dying process interrupted the job (the poison-pill guard).
    std::string interruptions() const { return prefix_ + "kiqd:reliable:interruptions"; }

    // Unique jobs (unique_jobs.hpp): a digest's keys, the hash of held EXEC locks
    // (key → "<identity> <token>") and the reaper's election lock.
    std::string digest_key(std::string_view digest, std::string_view suffix = "") const {
        std::string key;  // one allocation: a batched refill builds two per lock
        key.reserve(prefix_.size() + digest.size() + suffix.size());
        key += prefix_;
        key += digest;
        key += suffix;
        return key;
    }
    std::string unique_held() const { return prefix_ + "kiqd:unique:held"; }
    std::string unique_reaper_lock() const { return prefix_ + "kiqd:unique:reaper"; }
    // Exists while the process's lock keeper runs (written before its processors start): the
    // reaper frees no lock of an owner that has it, heartbeat record or not.
    std::string unique_alive(std::string_view identity) const {
        return prefix_ + "kiqd:unique:alive:" + std::string(identity);
    }

    // Pause control (pause_control.hpp): the paused queues and the worker classes an operator
    // paused (SETs), the classes that have parked jobs (HASH class → strategy descriptor), the
    // resume task's election lock, and a class's parked jobs under GitLab's names (ZSET of
    // payloads scored by the INCR counter, so resuming keeps their order). `worker` is the
    // class name as ActiveSupport's underscore writes it (pause_control_worker_name).
    std::string paused_queues() const { return prefix_ + "kiqd:pause:queues"; }
    std::string paused_workers() const { return prefix_ + "kiqd:pause:workers"; }
    std::string parked_classes() const { return prefix_ + "kiqd:pause:parked"; }
    std::string pause_resume_lock() const { return prefix_ + "kiqd:pause:resume-lock"; }
    std::string parked_jobs(std::string_view worker) const {
        return prefix_ + "sidekiq:pause_control:paused_jobs:zset:{" + std::string(worker) + "}";
    }
    std::string parked_score(std::string_view worker) const {
        return prefix_ + "sidekiq:pause_control:paused_jobs:score:{" + std::string(worker) + "}";
    }
    // Throttle (throttle.hpp): the fixed-window counter of one window of one class and
    // discriminator, laid out as Rack::Attack's "rack::attack:<window>:<name>:<discriminator>".
    std::string throttle(long long window, std::string_view scope) const {
        return prefix_ + "kiqd:throttle:" + std::to_string(window) + ":" + std::string(scope);
    }
    // Concurrency limits (concurrency_limit.hpp): per scope ("<Class>" or
    // "<Class>:tenant:<tenant>") a ZSET of slots (member → expiry, epoch ms) and a LIST of
    // parked payloads; a HASH of the scopes in use (scope → limit) and the checker's lock.
    std::string concurrency_slots(std::string_view scope) const {
        return prefix_ + "kiqd:concurrency:" + std::string(scope) + ":slots";
    }
    std::string concurrency_waiting(std::string_view scope) const {
        return prefix_ + "kiqd:concurrency:" + std::string(scope) + ":waiting";
    }
    std::string concurrency_scopes() const { return prefix_ + "kiqd:concurrency:scopes"; }
    std::string concurrency_check_lock() const { return prefix_ + "kiqd:concurrency:check-lock"; }

    // The name of a queue from its list key ("queue:x" → "x").
    std::string_view queue_name(std::string_view key) const {
        return key.substr(prefix_.size() + 6);
    }
    const std::string& prefix() const { return prefix_; }

  private:
    std::string prefix_;  // "" or "ns:"
};

}  // namespace kiqd
