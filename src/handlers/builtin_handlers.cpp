// The handlers every kiqd has, for demos, benchmarks and smoke tests of a deployment.
#include <chrono>

#include "kiqd/handler_registry.hpp"

namespace kiqd {
namespace {

// args[0], parsed on its own; null when there are no args.
nlohmann::json first_arg(const Job& job) {
    const auto text = job.arg_json(0);
    return text ? nlohmann::json::parse(*text) : nlohmann::json();
}

}  // namespace

void register_builtin_handlers(HandlerRegistry& registry) {
    registry.add("Kiqd::Noop", [](const Job&, JobContext&) {});
    // These read args[0] alone (Job::arg_json): the other arguments, however large, are never
    // parsed.
    registry.add("Kiqd::Sleep", [](const Job& job, JobContext& ctx) {
        const auto arg = first_arg(job);
        if (!arg.is_number() || arg.get<double>() < 0)
            throw JobError("ArgumentError",
                           "Kiqd::Sleep expects args[0] = seconds (a number >= 0)");
        const auto d = std::chrono::duration<double>(arg.get<double>());
        if (ctx.stop.wait_for(d)) throw Interrupted();
    });
    registry.add("Kiqd::Fail", [](const Job& job, JobContext&) {
        std::string message = "Kiqd::Fail";
        if (job.arg_json(0)) {
            const auto arg = first_arg(job);
            message = arg.is_string() ? arg.get<std::string>() : arg.dump();
        }
        throw JobError("RuntimeError", message);
    });
}

}  // namespace kiqd
