# The protocol's framing (runners/ruby/lib/kiqd/runner/channel.rb) over real descriptors: frames
# that arrive in pieces or several to a read, end of file inside a frame, a declared length over
# the limit, and writers on many threads at once.
require_relative "support"
require "io/nonblock"

class ChannelTest < Minitest::Test
  include UnitHarness::Frames

  def setup
    @ours, @theirs = Socket.pair(:UNIX, :STREAM)
    @channel = KiqdRubyRunner::Channel.new(@theirs)
  end

  def teardown
    [@ours, @theirs].each { |io| io.close unless io.closed? }
  end

  # Waits until `thread` is blocked (in read(2), here), so that what the test writes next
  # arrives in a later read than what came before.
  def blocked(thread) = UnitHarness.wait_until("the reader blocked") { thread.status == "sleep" || !thread.alive? }

  def test_a_frame_that_arrives_in_pieces_is_returned_once_whole
    bytes = frame("job 7", '{"class":"A","args":[1]}')
    @ours.write(bytes.byteslice(0, 2)) # half of the length
    reader = Thread.new { @channel.read_frame }
    [2, 6, 11].each_cons(2) do |from, to|
      blocked(reader)
      assert reader.alive?, "no frame before all of it arrived"
      @ours.write(bytes.byteslice(from, to - from))
    end
    blocked(reader)
    assert reader.alive?
    @ours.write(bytes.byteslice(11, bytes.bytesize))
    assert_equal ["job 7", '{"class":"A","args":[1]}'], reader.value
  end

  def test_several_frames_in_one_read_then_end_of_file
    binary = "\x00\xFF\n\xC3(".b # a newline and bytes that are not UTF-8, never re-encoded
    @ours.write(frame("job 1", "{}") + frame("quiet", "") + frame("exhausted 2", binary) + frame("written 3", "x"))
    @ours.close_write
    assert_equal ["job 1", "{}"], @channel.read_frame
    assert_equal ["quiet", ""], @channel.read_frame
    type, data = @channel.read_frame
    assert_equal "exhausted 2", type
    assert_equal binary, data
    assert_equal Encoding::BINARY, data.encoding
    assert_equal ["written 3", "x"], @channel.read_frame
    assert_nil @channel.read_frame, "end of file after the last frame"
  end

  def test_end_of_file_inside_the_length_or_the_body_is_end_of_file
    @ours.write(frame("job 1", "{}") + frame("job 2", "{}").byteslice(0, 9))
    @ours.close_write
    assert_equal ["job 1", "{}"], @channel.read_frame
    assert_nil @channel.read_frame, "a torn body is not a frame"

    ours, theirs = Socket.pair(:UNIX, :STREAM)
    ours.write("\x00\x00")
    ours.close_write
    assert_nil KiqdRubyRunner::Channel.new(theirs).read_frame, "a torn length is not a frame"
  ensure
    [ours, theirs].each { |io| io&.close }
  end

  def test_a_body_without_a_newline_has_empty_data
    @ours.write([5].pack("N") + "quiet")
    assert_equal ["quiet", ""], @channel.read_frame
  end

  def test_an_empty_body_is_refused
    @ours.write([0].pack("N"))
    error = assert_raises(RuntimeError) { @channel.read_frame }
    assert_equal "an empty frame (no type)", error.message
  end

  def test_a_declared_length_over_64_mib_is_refused_before_its_body
    @ours.write([KiqdRubyRunner::MAX_FRAME + 1].pack("N"))
    error = assert_raises(RuntimeError) { @channel.read_frame }
    assert_equal "frame of #{KiqdRubyRunner::MAX_FRAME + 1} bytes", error.message
  end

  def test_a_frame_of_the_largest_length_is_read
    data = "x" * (KiqdRubyRunner::MAX_FRAME - "job 1\n".bytesize)
    writer = Thread.new { @ours.write(frame("job 1", data)) }
    type, got = @channel.read_frame
    writer.join
    assert_equal "job 1", type
    assert_equal data.bytesize, got.bytesize
    assert got.end_with?("xxx")
  end

  # Each frame is written whole under the write lock: big frames (more than a socket buffer)
  # from eight threads at once arrive one after another, none cut into another.
  def test_frames_written_by_many_threads_at_once_never_interleave
    reader = KiqdRubyRunner::Channel.new(@ours)
    writers = Array.new(8) do |t|
      Thread.new do
        20.times { |i| @channel.send_frame("done #{t * 100 + i}", (t + 65).chr * 300_000) }
      end
    end
    frames = Array.new(160) { reader.read_frame }
    writers.each(&:join)
    frames.each do |type, data|
      t, i = type.delete_prefix("done ").to_i.divmod(100)
      assert_equal 300_000, data.bytesize
      assert_equal (t + 65).chr * 300_000, data, "frame #{t}/#{i} is one thread's bytes only"
    end
    assert_equal 160, frames.map(&:first).uniq.size
  end

  def test_send_json_writes_utf8_json_as_bytes
    @channel.send_json("ready", {"pid" => 1, "runner" => "été"})
    buf = "".b
    type, data = read_frame(@ours, buf)
    assert_equal "ready", type
    assert_equal({"pid" => 1, "runner" => "été"}, JSON.parse(data.force_encoding(Encoding::UTF_8)))
  end

  def test_blocking_makes_the_descriptor_blocking
    @theirs.nonblock = true
    @channel.blocking!
    refute @theirs.nonblock?, "worker threads wait in read(2) itself"
  end
end
