#include "kiqd/middleware_chain.hpp"

#include "kiqd/config.hpp"

namespace kiqd {

void MiddlewareChain::invoke(JobContext& ctx, const std::function<void()>& handler) const {
    invoke_from(0, ctx, handler);
}

void MiddlewareChain::invoke_from(size_t i, JobContext& ctx,
                                  const std::function<void()>& handler) const {
    if (i == entries_.size()) {
        ctx.handler_ran = true;
        handler();
        return;
    }
    entries_[i]->call(ctx, [&] { invoke_from(i + 1, ctx, handler); });
}

std::vector<std::string> MiddlewareChain::names() const {
    std::vector<std::string> out;
    for (const auto& e : entries_) out.emplace_back(e->name());
    return out;
}

void MiddlewareRegistry::add(std::string name, MiddlewareFactory factory) {
    factories_[std::move(name)] = std::move(factory);
}

MiddlewareChain MiddlewareRegistry::build(const std::vector<MiddlewareSpec>& specs) const {
    MiddlewareChain chain;
    for (size_t i = 0; i < specs.size(); ++i) {
        const auto& spec = specs[i];
        auto it = factories_.find(spec.name);
        if (it == factories_.end())
            throw ConfigError("server_middleware[" + std::to_string(i) + "]",
                              "unknown middleware '" + spec.name + "'", spec.line);
        chain.add(it->second(spec.options));
    }
    return chain;
}

}  // namespace kiqd
