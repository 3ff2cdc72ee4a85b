# TLS: the real Ruby Sidekiq 6.4.1 client (redis-rb 4.8 with `ssl_params`) pushes jobs
# to a redis-server that speaks TLS only and wants a client certificate; kiqd, connected over
# rediss:// with its own client certificate, runs them, and the Sidekiq API (what the Web UI
# reads) sees kiqd's process over TLS. Certificates: tests/support/tls_certs.sh.
require "support"
require "openssl"

class TlsInteropTest < Minitest::Test
  include KiqdInterop::Helpers

  def certs
    @certs ||= begin
      dir = File.join(tmpdir, "certs")
      ok = system("/bin/sh", File.join(KiqdInterop::ROOT, "tests/support/tls_certs.sh"), dir)
      flunk("tls_certs.sh failed") unless ok
      dir
    end
  end

  def cert(name)
    File.join(certs, name)
  end

  def ssl_params
    { ca_file: cert("ca.crt"),
      cert: OpenSSL::X509::Certificate.new(File.read(cert("client.crt"))),
      key: OpenSSL::PKey.read(File.read(cert("client.key"))) }
  end

  # Replaces the suite's plain redis-server with one that has only a TLS port.
  def start_redis
    port = TestRedis.free_port
    log = File.join(tmpdir, "redis-#{port}.log")
    pid = Process.spawn("redis-server", "--port", "0", "--tls-port", port.to_s,
                        "--tls-cert-file", cert("server.crt"), "--tls-key-file", cert("server.key"),
                        "--tls-ca-cert-file", cert("ca.crt"), "--tls-auth-clients", "yes",
                        "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                        in: File::NULL, out: log, err: [:child, :out], chdir: tmpdir)
    @redis_server = KiqdInterop::Child.new("redis-server", pid, log)
    children << @redis_server
    @redis_url = "rediss://127.0.0.1:#{port}/0"
    @redis = Redis.new(url: @redis_url, ssl_params: ssl_params)
    wait_until(10, "redis-server (TLS) on port #{port}") do
      flunk("redis-server on port #{port} exited:\n#{File.read(log)}") unless @redis_server.alive?
      @redis.info("server")["process_id"].to_i == pid  # not another server's answer
    rescue Redis::CannotConnectError, OpenSSL::SSL::SSLError, Errno::ECONNREFUSED
      false
    end
    old_pool = Sidekiq.instance_variable_get(:@redis)
    Sidekiq.configure_client { |c| c.redis = { url: @redis_url, ssl_params: ssl_params, size: 5 } }
    old_pool&.shutdown(&:close) rescue nil
    @redis
  end

  def kiqd_redis_config
    { "url" => redis_url,
      "tls" => { "ca_file" => cert("ca.crt"), "cert_file" => cert("client.crt"),
                 "key_file" => cert("client.key") } }
  end

  def test_jobs_pushed_by_ruby_over_tls_run_in_kiqd_and_the_api_sees_it
    # A plaintext client is turned away: the server really is TLS-only.
    plain = Redis.new(url: redis_url.sub("rediss://", "redis://"), reconnect_attempts: 0,
                      connect_timeout: 1, timeout: 1)
    assert_raises(Redis::BaseConnectionError) { plain.ping }
    plain.close

    jids = Array.new(20) { |i| Test::Record.perform_async("tls", i) }
    bulk = Sidekiq::Client.push_bulk("class" => Test::Record, "args" => [["bulk", 0], ["bulk", 1]])
    kiqd = start_kiqd({ "redis" => kiqd_redis_config }, test_daemon: true)
    expected = jids + bulk
    _records, by_jid = wait_for_each_run_once(expected)
    assert_equal ["tls", 3], by_jid[jids[3]].first["args"]

    # What the Web UI's Busy page and sidekiqmon read, through the TLS client.
    process = wait_until(10, "kiqd in Sidekiq::ProcessSet") { process_for(kiqd) }
    assert_equal ["default"], process["queues"]
    wait_until(10, "the processed count through Sidekiq::Stats") do
      Sidekiq::Stats.new.processed >= expected.size
    end
    assert_equal 0, Sidekiq::Queue.new("default").size
    assert_equal 0, Sidekiq::DeadSet.new.size
  end
end
