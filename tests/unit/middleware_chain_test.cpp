#include "kiqd/middleware_chain.hpp"

#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include <catch2/catch.hpp>

#include "kiqd/config.hpp"

using namespace kiqd;

namespace {

class Recorder final : public ServerMiddleware {
  public:
    Recorder(std::string name, std::vector<std::string>& log, bool call_next = true)
        : name_(std::move(name)), log_(log), call_next_(call_next) {}
    std::string_view name() const override { return name_; }
    void call(JobContext&, const Next& next) const override {
        log_.push_back(name_ + ">");
        if (call_next_) next();
        log_.push_back("<" + name_);
    }

  private:
    std::string name_;
    std::vector<std::string>& log_;
    bool call_next_;
};

struct Ctx {
    Job job;
    std::shared_ptr<spdlog::logger> log =
        std::make_shared<spdlog::logger>("t", std::make_shared<spdlog::sinks::null_sink_mt>());
    StopSignal stop;
    redis::Connection conn{redis::ConnectionOptions{}};
    Keys keys;
    Config config;
    std::string id = "me";
    JobContext ctx{job, *log, stop, conn, keys, config, id};
};

}  // namespace

TEST_CASE("the chain runs in order around the handler", "[middleware]") {
    std::vector<std::string> log;
    MiddlewareChain chain;
    chain.add(std::make_shared<Recorder>("a", log));
    chain.add(std::make_shared<Recorder>("b", log));
    Ctx c;
    chain.invoke(c.ctx, [&] { log.push_back("handler"); });
    CHECK(log == std::vector<std::string>{"a>", "b>", "handler", "<b", "<a"});
    CHECK(c.ctx.handler_ran);
}

TEST_CASE("a middleware that does not call next skips the handler", "[middleware]") {
    std::vector<std::string> log;
    MiddlewareChain chain;
    chain.add(std::make_shared<Recorder>("park", log, false));
    Ctx c;
    chain.invoke(c.ctx, [&] { log.push_back("handler"); });
    CHECK(log == std::vector<std::string>{"park>", "<park"});
    CHECK_FALSE(c.ctx.handler_ran);
}

TEST_CASE("handler exceptions pass through the chain unchanged", "[middleware]") {
    std::vector<std::string> log;
    MiddlewareChain chain;
    chain.add(std::make_shared<Recorder>("a", log));
    Ctx c;
    CHECK_THROWS_WITH(chain.invoke(c.ctx, [] { throw JobError("X", "bad"); }), "bad");
}

TEST_CASE("middleware is built by name from the YAML list", "[middleware]") {
    std::vector<std::string> log;
    MiddlewareRegistry registry;
    registry.add("rec", [&](const YAML::Node& opts) {
        return std::make_shared<Recorder>(opts.IsMap() ? opts["as"].as<std::string>() : "rec", log);
    });
    auto config =
        parse_config("queues: [a]\nserver_middleware: [rec, {rec: {as: two}}]\n", "x", "");
    auto chain = registry.build(config.server_middleware);
    CHECK(chain.names() == std::vector<std::string>{"rec", "two"});
    config = parse_config("queues: [a]\nserver_middleware:\n  - nope\n", "x", "");
    CHECK_THROWS_WITH(registry.build(config.server_middleware),
                      Catch::Contains("server_middleware[0] (line 3): unknown middleware 'nope'"));
}
