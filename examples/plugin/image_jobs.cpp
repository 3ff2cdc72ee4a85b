// libimage_jobs.so: an example kiqd plugin. List it in the YAML:
//
//   plugins: [/path/to/libimage_jobs.so]
//
// Handlers:
//   Example::Thumbnail  args [path, size]: records "path@size" in the Redis list
//                       example:thumbnails (evidence for the tests) and logs it.
//   Example::Explode    throws std::runtime_error: a normal Sidekiq retry, never a crash.
//   Example::Reject     throws kiqd::JobError("ArgumentError", ...): the error_class you choose.
#include <kiqd/plugin.hpp>
#include <stdexcept>

KIQD_PLUGIN(handlers, middleware) {
    handlers.add("Example::Thumbnail", [](const kiqd::Job& job, kiqd::JobContext& ctx) {
        const auto& args = job.args();
        if (args.size() != 2 || !args[0].is_string() || !args[1].is_number_integer())
            throw kiqd::JobError("ArgumentError", "expected [path, size]");
        const std::string entry =
            args[0].get<std::string>() + "@" + std::to_string(args[1].get<long long>());
        ctx.redis.command({"RPUSH", "example:thumbnails", entry});
        ctx.log.info("thumbnail {} done", entry);
    });
    handlers.add("Example::Explode", [](const kiqd::Job&, kiqd::JobContext&) {
        throw std::runtime_error("the plugin blew up");
    });
    handlers.add("Example::Reject", [](const kiqd::Job& job, kiqd::JobContext&) {
        throw kiqd::JobError("ArgumentError", "rejected " + job.args().dump());
    });
}
