// The handlers every kiqd has, for demos, benchmarks and smoke tests of a deployment.
#include <chrono>

#include "kiqd/handler_registry.hpp"

namespace kiqd {

void register_builtin_handlers(HandlerRegistry& registry) {
    registry.add("Kiqd::Noop", [](const Job&, JobContext&) {});
    registry.add("Kiqd::Sleep", [](const Job& job, JobContext& ctx) {
        const auto& args = job.args();
        if (args.empty() || !args[0].is_number() || args[0].get<double>() < 0)
            throw JobError("ArgumentError",
                           "Kiqd::Sleep expects args[0] = seconds (a number >= 0)");
        const auto d = std::chrono::duration<double>(args[0].get<double>());
        if (ctx.stop.wait_for(d)) throw Interrupted();
    });
    registry.add("Kiqd::Fail", [](const Job& job, JobContext&) {
        const auto& args = job.args();
        std::string message = "Kiqd::Fail";
        if (!args.empty())
            message = args[0].is_string() ? args[0].get<std::string>() : args[0].dump();
        throw JobError("RuntimeError", message);
    });
}

}  // namespace kiqd
