# Seat sockets (runners/ruby/lib/kiqd/runner/server.rb): the runner asks for them in its ready,
# and a `seats` frame on the protocol socket carries them (SCM_RIGHTS) as kiqd sends them. Each
# seat then takes its jobs on its own socket and answers there, untagged; a retry decision waits
# for `written` on the same seat; the protocol socket still carries `quiet`; and kiqd closing
# the sockets ends the process once the jobs in hand are answered. The Server runs in this
# process with the booted test app (real Sidekiq, real Redis), as in server_test.rb.
require_relative "support"
require "securerandom"

class SeatsTest < Minitest::Test
  include UnitHarness::Frames
  include UnitHarness::ServerCase

  def teardown
    @gates.each { |key| UnitApp.release(key) } unless passed?
    [@ours, *@seats.to_a.map(&:first)].each { |s| s.close unless s.closed? }
    @server&.join(30)
    @theirs.close unless @theirs.closed?
  end

  # A Server with `threads` workers, given `seats` seat sockets as kiqd gives them; returns its
  # ready.
  def start(threads, seats:, decisions: false)
    type, data = start_server(threads, decisions: decisions)
    assert_equal "ready", type
    give_seats(seats)
    JSON.parse(data)
  end

  def give_seats(n)
    pairs = Array.new(n) { Socket.pair(:UNIX, :STREAM) }
    rights = Socket::AncillaryData.unix_rights(*pairs.map(&:last))
    @ours.sendmsg(frame("seats", JSON.generate("count" => n)), 0, nil, rights)
    pairs.each { |_, theirs| theirs.close } # the runner holds its own copies now
    @seats = pairs.map { |ours, _| [ours, "".b] }
  end

  def job_on(seat, payload) = send_frame(@seats[seat][0], "job", JSON.generate(payload))
  def answer_on(seat) = read_frame(@seats[seat][0], @seats[seat][1])

  # kiqd closes every socket: the process's threads end and run returns.
  def finish
    [@ours, *@seats.map(&:first)].each(&:close_write)
    assert @server.join(60), "Server#run returns once every socket is closed"
  end

  def test_ready_asks_for_seats
    assert_equal true, start(2, seats: 0)["seats"]
    finish
  end

  def test_each_seat_runs_its_jobs_on_its_own_socket_and_answers_there_untagged
    start(2, seats: 3)
    %w[s0 s1 s2].each { |k| gate(k) }
    3.times { |i| job_on(i, payload("UnitGateJob", "s#{i}")) }
    UnitHarness.wait_until("three jobs running at once") { started.size == 3 }
    assert_equal 3, started.map(&:last).uniq.size, "each seat's job on a thread of its own"
    [2, 0, 1].each do |i|
      UnitApp.release("s#{i}")
      assert_equal ["done", "{}"], answer_on(i)
    end
    # A seat takes its next job once its answer is written.
    job_on(1, payload("UnitNoopJob"))
    assert_equal ["done", "{}"], answer_on(1)
    finish
  end

  # Only the protocol socket closes (kiqd is gone, or a driver that keeps the seats): the job in
  # hand is still answered on its seat, then every seat thread ends and run returns.
  def test_end_of_file_on_the_protocol_socket_ends_every_seat
    start(1, seats: 2)
    gate("e")
    job_on(0, payload("UnitGateJob", "e"))
    UnitHarness.wait_until("the job running") { started.size == 1 }
    @ours.close_write
    UnitApp.release("e")
    assert_equal ["done", "{}"], answer_on(0)
    assert @server.join(60), "Server#run returns with the seats still open on kiqd's side"
    assert_equal :eof, answer_on(1), "the idle seat is closed by the runner"
  end

  def test_quiet_still_comes_on_the_protocol_socket
    start(1, seats: 1)
    gate("q")
    job_on(0, payload("UnitStoppingJob", "q"))
    UnitHarness.wait_until("the job running") { started.size == 1 }
    send_frame(@ours, "quiet")
    UnitHarness.wait_until("quiet taken while the seat's job runs") { @glue.stopping.stopping? }
    UnitApp.release("q")
    assert_equal ["done", "{}"], answer_on(0)
    assert_equal [Sidekiq::VERSION.to_i >= 7 ? true : nil], UnitApp.records(:stopping)
    finish
  end

  def test_a_retry_decision_waits_for_written_on_its_seat
    start(1, seats: 2, decisions: true)
    before = Time.now.to_f
    job_on(1, payload("UnitFailJob", "boom", jid: "seat-d"))
    type, data = answer_on(1)
    assert_equal "fail", type
    fail = JSON.parse(data)
    assert_equal %w[UnitFailError boom retry], fail.values_at("class", "message", "decision")
    assert_operator fail["retry_at"], :>=, before + 100
    assert_empty UnitApp.records(:errors), "the error handlers wait for the write"
    send_frame(@seats[1][0], "written", "{}")
    assert_equal ["done", "{}"], answer_on(1)
    assert_equal [["UnitFailError", "seat-d"]], UnitApp.records(:errors)
    finish
  end
end
