# frozen_string_literal: true

# What the application declares, reported to kiqd in `ready` (docs/runner-protocol.md, "What the
# application declares"): the server settings it made itself, the capsules it defines, its job
# classes' queues and worker attributes, and the gems that change Sidekiq's fetch. Read once per
# `ready` on the thread that sends it (the main thread), after boot; nothing here may fail the
# boot, so each part says nothing rather than raise.

module KiqdRubyRunner
  module_function

  def greeting(extra = {})
    {"pid" => Process.pid, "runner" => "kiqd-ruby-runner #{VERSION} (ruby #{RUBY_VERSION}, sidekiq #{Sidekiq::VERSION})",
     "app" => app_settings}.merge(extra)
  end

  # Sidekiq's defaults for the settings kiqd takes from the app (all versions alike).
  SIDEKIQ_DEFAULTS = {"dead_max_jobs" => 10_000, "dead_timeout_in_seconds" => 180 * 24 * 60 * 60}.freeze

  # The server settings the application made itself (configure_server), for kiqd: max_retries,
  # dead_max_jobs and dead_timeout_in_seconds, where they differ from Sidekiq's defaults.
  def app_settings
    cfg = Sidekiq::VERSION.to_i >= 7 ? Sidekiq.default_configuration : Sidekiq.options
    out = {}
    out["max_retries"] = cfg[:max_retries] if cfg[:max_retries].is_a?(Integer)
    SIDEKIQ_DEFAULTS.each do |key, default|
      value = cfg[key.to_sym]
      out[key] = value if value.is_a?(Integer) && value != default
    end
    caps = app_capsules
    out["capsules"] = caps unless caps.empty?
    classes = app_classes
    out["classes"] = classes unless classes.empty?
    patches = fetch_patches
    out["fetch_patches"] = patches unless patches.empty?
    out
  rescue StandardError
    {}
  end

  # Gems that act in Sidekiq's fetch (its fetch class replaced, or modules prepended to
  # BasicFetch, Manager or Processor). kiqd fetches in C++ and does not run that code, so it
  # warns about each one, except sidekiq-throttled, whose admission check this runner makes
  # before each job (Glue#throttle_check).
  HONOURED_FETCH_GEMS = %w[sidekiq-throttled].freeze

  def fetch_patches
    cfg = Sidekiq::VERSION.to_i >= 7 ? Sidekiq.default_configuration : Sidekiq.options
    out = []
    fetch = cfg[:fetch_class] || cfg[:fetch]
    fetch = fetch.class unless fetch.nil? || fetch.is_a?(Module)
    out << patch_entry("fetch", fetch) if fetch && fetch != Sidekiq::BasicFetch
    targets = %w[BasicFetch Manager Processor].filter_map { |n| Sidekiq.const_get(n, false) if Sidekiq.const_defined?(n, false) }
    targets.each do |target|
      target.ancestors.take_while { |m| m != target }.each { |m| out << patch_entry(target.name, m) }
    end
    out.compact.uniq
  rescue StandardError
    []
  end

  def patch_entry(target, mod)
    gem = gem_of(mod)
    return nil if gem == "sidekiq" # Sidekiq's own modules
    {"target" => target, "module" => mod.name.to_s, "gem" => gem || "",
     "honoured" => HONOURED_FETCH_GEMS.include?(gem)}
  end

  # The gem whose files define `mod`'s methods, or nil.
  def gem_of(mod)
    names = mod.instance_methods(false) + mod.private_instance_methods(false)
    file = names.lazy.filter_map { |n| mod.instance_method(n).source_location&.first }.first
    return nil unless file
    Gem.loaded_specs.values.find { |spec| file.start_with?("#{spec.full_gem_path}/") }&.name
  end

  # The capsules the application defines besides the default one (config.capsule, Sidekiq 7
  # and later): name, concurrency and its queues with their weights (0: strict order).
  def app_capsules
    return [] unless Sidekiq.respond_to?(:default_configuration)
    Sidekiq.default_configuration.capsules.filter_map do |name, cap|
      next if name.to_s == "default"
      {"name" => name.to_s, "concurrency" => cap.concurrency.to_i,
       "queues" => cap.weights.map { |queue, weight| [queue.to_s, weight.to_i] }}
    end
  rescue StandardError
    []
  end

  # GitLab's WorkerAttributes methods, where a class has them: kiqd's worker metadata.
  WORKER_ATTRIBUTES = {"urgency" => :get_urgency, "resource_boundary" => :get_worker_resource_boundary,
                       "feature_category" => :get_feature_category}.freeze
  WORKER_FLAGS = {"idempotent" => :idempotent?, "external_dependencies" => :worker_has_external_dependencies?}.freeze

  # Every Sidekiq job class loaded at boot (a Rails app in production eager-loads them) whose
  # sidekiq_options name a queue other than "default", or that has worker attributes.
  def app_classes
    job = defined?(Sidekiq::Job) ? Sidekiq::Job : Sidekiq::Worker
    out = []
    ObjectSpace.each_object(Class) do |klass|
      next unless klass.include?(job) && klass.name.is_a?(String) && !klass.name.empty?
      entry = app_class(klass)
      out << entry if entry.size > 1
    rescue StandardError, ScriptError
      next # a class whose methods raise says nothing
    end
    out.sort_by { |entry| entry["class"] }
  end

  def app_class(klass)
    entry = {"class" => klass.name}
    queue = klass.get_sidekiq_options["queue"].to_s
    entry["queue"] = queue unless queue.empty? || queue == "default"
    WORKER_ATTRIBUTES.each do |key, name|
      value = klass.public_send(name) if klass.respond_to?(name)
      entry[key] = value.to_s unless value.nil? || value.to_s.empty?
    end
    WORKER_FLAGS.each { |key, name| entry[key] = klass.public_send(name) ? true : false if klass.respond_to?(name) }
    entry["tags"] = Array(klass.get_tags).map(&:to_s) if klass.respond_to?(:get_tags)
    entry
  end
end
