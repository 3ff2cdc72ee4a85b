# frozen_string_literal: true

# Loading the application, once, on the main thread (in a master: before any fork), and
# resolving a job's class by its name (on the worker threads).

module KiqdRubyRunner
  module_function

  # Loads the application as Sidekiq's CLI does, with Sidekiq in server mode, so that the
  # application's Sidekiq.configure_server blocks (server middleware, death handlers) run; a
  # Rails root gets `rails` and `sidekiq/rails` first (Sidekiq's reloader, ActiveJob options).
  def boot(opts, threads)
    if opts[:environment]
      ENV["RAILS_ENV"] = ENV["RACK_ENV"] = opts[:environment]
    end
    require "sidekiq"
    require "sidekiq/cli" # Sidekiq.server? is true from here on
    Glue.before_boot(threads)
    opts[:require].each do |path|
      full = File.expand_path(path)
      if File.directory?(full)
        require "rails"
        require "sidekiq/rails"
        full = File.join(full, "config", "environment.rb")
      end
      require full
    end
    Glue.new(threads)
  end

  def constantize(str)
    return Object.const_get(str) unless str.include?("::")
    names = str.split("::")
    names.shift if names.empty? || names.first.empty?
    names.inject(Object) { |constant, name| constant.const_get(name, false) }
  end
end
