// my_kiqd: a daemon of your own built on kiqd's public API. It has the stock command line
// (`my_kiqd -C config.yml`, `my_kiqd check-config -C config.yml`), loads `plugins:` and
// `handlers:` from the YAML like the stock binary, and adds C++ handlers and a middleware.
//
//   handlers: Greeter (args: [name]) logs a greeting; Divide (args: [a, b]) fails with
//   ZeroDivisionError on b == 0, which Sidekiq retries like any failure.
//   middleware: "timing" (list it under server_middleware:) logs each job's duration.
#include <chrono>
#include <kiqd/kiqd.hpp>

namespace {

class Timing : public kiqd::ServerMiddleware {
  public:
    std::string_view name() const override { return "timing"; }
    void call(kiqd::JobContext& ctx, const kiqd::Next& next) const override {
        const auto start = std::chrono::steady_clock::now();
        next();
        const std::chrono::duration<double, std::milli> took =
            std::chrono::steady_clock::now() - start;
        ctx.log.info("timing: {} jid={} took {:.3f} ms", ctx.job.display_class(), ctx.job.jid,
                     took.count());
    }
};

}  // namespace

int main(int argc, char** argv) {
    kiqd::HandlerRegistry handlers;
    handlers.add("Greeter", [](const kiqd::Job& job, kiqd::JobContext& ctx) {
        const auto& args = job.args();
        const std::string who = !args.empty() && args[0].is_string() ? args[0].get<std::string>()
                                                                     : std::string("world");
        ctx.log.info("hello, {}!", who);
    });
    handlers.add("Divide", [](const kiqd::Job& job, kiqd::JobContext& ctx) {
        const auto& args = job.args();
        if (args.size() != 2 || !args[0].is_number() || !args[1].is_number())
            throw kiqd::JobError("ArgumentError", "expected two numbers");
        if (args[1].get<double>() == 0) throw kiqd::JobError("ZeroDivisionError", "divided by 0");
        ctx.log.info("{} / {} = {}", args[0].dump(), args[1].dump(),
                     args[0].get<double>() / args[1].get<double>());
    });
    kiqd::MiddlewareRegistry middleware;
    middleware.add("timing", [](const YAML::Node&) { return std::make_shared<Timing>(); });
    return kiqd::run(argc, argv, handlers, middleware);
}
