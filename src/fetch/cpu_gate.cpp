#include "fetch/cpu_gate.hpp"

namespace kiqd {

CpuGate::CpuGate(const WorkerCatalog& catalog, size_t limit, size_t held_limit)
    : catalog_(catalog),
      limit_(std::max<size_t>(limit, 1)),
      held_limit_(std::max<size_t>(held_limit, 1)) {}

bool CpuGate::cpu_bound(const std::string& job_class) const {
    const auto* e = catalog_.find(job_class);
    return e && e->metadata.resource_boundary == ResourceBoundary::cpu;
}

CpuGate::Admit CpuGate::admit(UnitOfWork& unit) {
    std::unique_lock lock(mutex_);
    for (;;) {
        if (closed_) return Admit::closed;
        // Held jobs go first: a new job takes a slot only when nobody is waiting for one.
        if (running_ < limit_ && held_.empty()) {
            ++running_;
            return Admit::run;
        }
        if (held_.size() < held_limit_) {
            held_.push_back(std::move(unit));
            return Admit::held;
        }
        room_.wait(lock);
    }
}

std::optional<UnitOfWork> CpuGate::release() {
    std::lock_guard lock(mutex_);
    if (!closed_ && !held_.empty()) {
        UnitOfWork next = std::move(held_.front());
        held_.pop_front();
        room_.notify_one();
        return next;  // the slot passes to the held job
    }
    --running_;
    return std::nullopt;
}

std::vector<UnitOfWork> CpuGate::close() {
    std::lock_guard lock(mutex_);
    closed_ = true;
    std::vector<UnitOfWork> out(std::make_move_iterator(held_.begin()),
                                std::make_move_iterator(held_.end()));
    held_.clear();
    room_.notify_all();
    return out;
}

std::pair<size_t, size_t> CpuGate::counts() const {
    std::lock_guard lock(mutex_);
    return {running_, held_.size()};
}

std::vector<std::string> CpuGate::held_payloads() const {
    std::lock_guard lock(mutex_);
    std::vector<std::string> out;
    for (const auto& u : held_) out.push_back(u.payload);
    return out;
}

}  // namespace kiqd
