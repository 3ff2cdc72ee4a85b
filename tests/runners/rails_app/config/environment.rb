require_relative "application"
File.open(ENV["BOOT_LOG"], "a") { |f| f.puts Process.pid } if ENV["BOOT_LOG"]
Rails.application.initialize!
