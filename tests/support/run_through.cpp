#include "support/run_through.hpp"

namespace kiqd::test {

bool run_through(TestRuntime& t, redis::Connection& conn, const ServerMiddleware& m,
                 const std::string& raw, const std::function<void()>& body,
                 const std::string* working, std::vector<redis::Command>* after_job) {
    auto parsed = parse_job(raw, "default");
    Job& job = std::get<Job>(parsed);
    JobContext ctx{job, *t.log, t.lifecycle.hard_stop, conn, t.keys, t.config, t.rt.identity};
    ctx.working_list = working;
    ctx.after_job = after_job;
    bool ran = false;
    m.call(ctx, [&] {
        ran = true;
        body();
    });
    return ran;
}

}  // namespace kiqd::test
