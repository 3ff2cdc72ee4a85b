# Uniqueness: jobs pushed by the real Ruby Sidekiq 6.4.1 client with the fields that
# sidekiq-unique-jobs' client middleware writes (lock, lock_args, lock_digest, lock_ttl) share
# their identity with kiqd: kiqd locks under the producer's lock_digest, and releases the gem's
# client lock of that jid when the gem's server would. sidekiq-unique-jobs itself is not packaged
# in Debian, so its client lock is written here the way its lock.lua writes it.
require "support"

class UniqueInteropTest < Minitest::Test
  include KiqdInterop::Helpers

  DIGEST = "uniquejobs:0123456789abcdef0123456789abcdef"

  # The client lock goes in before the push, as the gem's client middleware writes it: kiqd
  # may run the job the moment it is pushed.
  def push_locked(args)
    jid = SecureRandom.hex(12)
    now = Time.now.to_f
    redis.set(DIGEST, jid)
    redis.hset("#{DIGEST}:LOCKED", jid, now.to_s)
    redis.zadd("uniquejobs:digests", now, DIGEST)
    Sidekiq::Client.push("class" => "Test::Record", "args" => args, "jid" => jid,
                         "lock" => "until_and_while_executing", "lock_args" => ["acct-1"],
                         "lock_digest" => DIGEST, "lock_ttl" => 60)
  end

  def test_a_ruby_clients_lock_digest_is_the_identity_and_its_client_lock_is_released
    first = push_locked([1.5, "first"])
    start_kiqd({ "concurrency" => 3, "unique_jobs" => { "wait_interval" => 0.1 } },
               test_daemon: true)
    wait_until(10, "kiqd's exec lock under the client's digest") { redis.exists?("#{DIGEST}:EXEC") }
    # The gem's client lock of that jid is released once the run starts.
    refute redis.exists?("#{DIGEST}:LOCKED")
    assert_nil redis.zscore("uniquejobs:digests", DIGEST)
    # Other arguments, same lock_digest: the same identity, so it waits instead of running.
    second = push_locked([0, "second"])
    wait_until(10, "the second copy to wait for the lock") { redis.exists?("#{DIGEST}:WAIT") }
    wait_until(30, "both runs") { ran_records.size == 2 }
    a, b = ran_records.sort_by { |r| r["started"] }
    assert_equal [first, second], [a["jid"], b["jid"]]
    assert_operator b["started"], :>=, a["ended"]
    # Nothing stays locked (the gem's wake-up token on :QUEUED expires after 5 s).
    wait_until(10, "no lock left") { redis.keys("#{DIGEST}*").empty? }
    # kiqd's held-locks hash lists no lock; "kiqd:marker" is its encoding marker, not a lock.
    assert_equal [], redis.hkeys("kiqd:unique:held") - ["kiqd:marker"]
  end
end
