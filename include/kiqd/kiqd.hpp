#pragma once
// The public entry point for building your own kiqd binary:
//
//   int main(int argc, char** argv) {
//       kiqd::HandlerRegistry handlers;
//       handlers.add("HardWorker", [](const kiqd::Job& job, kiqd::JobContext& ctx) {
//           ctx.log.info("args={}", job.args().dump());
//       });
//       kiqd::MiddlewareRegistry middleware;   // names usable in `server_middleware:`
//       return kiqd::run(argc, argv, handlers, middleware);
//   }
//
// run() parses kiqd's command line (the same flags and subcommands as the stock binary), adds the
// built-in handlers, and runs the daemon until it is stopped. Exit codes: 0 clean stop,
// 64 bad command line, 78 bad configuration (EX_CONFIG).
#include "kiqd/client.hpp"
#include "kiqd/config.hpp"
#include "kiqd/handler_registry.hpp"
#include "kiqd/job.hpp"
#include "kiqd/job_context.hpp"
#include "kiqd/middleware_chain.hpp"

namespace kiqd {

constexpr int kExitUsage = 64;
constexpr int kExitConfig = 78;

int run(int argc, char** argv, HandlerRegistry& handlers, MiddlewareRegistry& middleware);
int run(int argc, char** argv);

}  // namespace kiqd
