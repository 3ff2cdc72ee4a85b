#include "kiqd/handler_registry.hpp"

namespace kiqd {

void HandlerRegistry::add(std::string job_class, Handler handler) {
    handlers_[std::move(job_class)] = std::move(handler);
}

void HandlerRegistry::add(std::string job_class, Handler handler, WorkerMetadata metadata,
                          std::string queue) {
    metadata.declared = true;
    declarations_[job_class] = Declaration{std::move(metadata), std::move(queue)};
    add(std::move(job_class), std::move(handler));
}

const HandlerRegistry::Declaration* HandlerRegistry::declaration(
    const std::string& job_class) const {
    auto it = declarations_.find(job_class);
    return it == declarations_.end() ? nullptr : &it->second;
}

const Handler* HandlerRegistry::find(const std::string& job_class) const {
    auto it = handlers_.find(job_class);
    if (it == handlers_.end()) it = handlers_.find("*");  // the fallback (a runner: "*" entry)
    return it == handlers_.end() ? nullptr : &it->second;
}

}  // namespace kiqd
