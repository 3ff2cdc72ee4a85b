#include "kiqd/handler_registry.hpp"

namespace kiqd {

void HandlerRegistry::add(std::string job_class, Handler handler) {
    handlers_[std::move(job_class)] = std::move(handler);
}

const Handler* HandlerRegistry::find(const std::string& job_class) const {
    auto it = handlers_.find(job_class);
    return it == handlers_.end() ? nullptr : &it->second;
}

}  // namespace kiqd
