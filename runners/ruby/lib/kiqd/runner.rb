# frozen_string_literal: true

# kiqd-ruby-runner's library: runs an application's own Sidekiq job classes for kiqd, several at
# once on threads, over the runner protocol (docs/runner-protocol.md in kiqd's sources). The
# executable (kiqd-ruby-runner) only finds this file and calls KiqdRubyRunner.main.
#
# It boots the application once, with Sidekiq in server mode (a Rails root the way Sidekiq's CLI
# boots one: `rails` and `sidekiq/rails` first, so Sidekiq's reloader wraps each job). When kiqd
# asks for a master (KIQD_RUNNER_PRELOAD=1, and no --no-preload), this process runs no job: it
# forks a child per `fork` frame, handing it the socket and pipes kiqd sent along, so the
# children share the boot copy-on-write. Each child (or, without preload, this process) runs
# KIQD_RUNNER_THREADS worker threads (default 1) that share the socket at KIQD_RUNNER_FD: a
# thread reads a frame under the read lock, runs the job, and writes its answer under the write
# lock. `job TAG` is answered `done TAG` / `fail TAG`; an untagged `job` (a kiqd that does not
# speak the tagged dialect) is answered untagged.
#
# A job runs the way the processor of the application's Sidekiq runs it (6.x, 7.x and 8.x). A
# failure is reported with its class, message, backtrace and what sidekiq_retry_in says
# (seconds, or in 7.x/8.x "kill"/"discard"), and to the application's error handlers;
# Sidekiq::JobRetry::Skip (an iterable job that re-pushed itself) counts as done. When kiqd says
# the retries are exhausted, sidekiq_retries_exhausted and the death handlers run. Retries, the
# dead set, fetching and all Redis bookkeeping are kiqd's, except with retry decisions, where
# the application's own Sidekiq::JobRetry decides and kiqd writes what it decided.
#
# `quiet` makes every job's `stopping?` true (an iterable job saves its cursor and re-pushes
# itself). SIGTERM raises Sidekiq::Shutdown in the running jobs (their ensure blocks run), waits
# half a second at most and exits without answering for them: kiqd requeues them. End of file
# on the socket: the jobs in hand finish and are answered, then the process exits 0. kiqd writes
# Sidekiq's execution metrics itself, so the metrics middleware Sidekiq's CLI adds is taken out
# of the chain: each job is counted once.
#
# The parts, in kiqd/runner/:
#   options.rb       the command line and KIQD_RUNNER_THREADS
#   boot.rb          loading the application; a job class by its name
#   channel.rb       the protocol's frames on the socket
#   server.rb        the worker threads and what each frame kiqd sends does (the per-job path)
#   glue.rb          what the runner takes from the app's Sidekiq, and how one job runs in it
#   failures.rb      a failed job's answer, the error and death handlers, `exhausted`
#   throttle.rb      sidekiq-throttled's admission check
#   decisions.rb     retry decisions: the app's Sidekiq::JobRetry with its writes sent to kiqd
#   lifecycle.rb     the app's lifecycle events, and `stopping?`
#   declarations.rb  what the app declares, reported in `ready`
#   master.rb        the forking master, and the fork hooks an app may register
#
# Loading this file loads no gem: Sidekiq and the application are required by KiqdRubyRunner.boot.

require "json"
require "socket"

module KiqdRubyRunner
  VERSION = "0.2.0"
end

require_relative "runner/channel"
require_relative "runner/options"
require_relative "runner/boot"
require_relative "runner/lifecycle"
require_relative "runner/decisions"
require_relative "runner/glue"
require_relative "runner/throttle"
require_relative "runner/failures"
require_relative "runner/declarations"
require_relative "runner/server"
require_relative "runner/master"

module KiqdRubyRunner
  module_function

  def main(argv)
    opts = parse_options(argv)
    fd = ENV["KIQD_RUNNER_FD"] or abort("kiqd-ruby-runner: KIQD_RUNNER_FD is not set (kiqd starts this program)")
    $stdout.sync = true
    $stderr.sync = true
    io = Socket.for_fd(Integer(fd))
    threads = threads_from_env
    return master(io, opts, threads) if ENV["KIQD_RUNNER_PRELOAD"] == "1" && !opts[:no_preload]
    glue = boot(opts, threads)
    Server.new(Channel.new(io), glue, threads).run
  end
end
