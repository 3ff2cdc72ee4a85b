# Many applications read the database while they boot (settings, feature flags). This one asks
# for the server's version, so a process that boots it holds a database connection afterwards:
# under kiqd's preloading runner, the master holds one when it forks its processes, and the
# processes must not share it.
Rails.application.config.after_initialize do
  RailsPgApp::DATABASE_VERSION = ActiveRecord::Base.connection.select_value("SHOW server_version")
end
