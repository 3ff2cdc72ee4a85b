# frozen_string_literal: true

# The protocol's framing (docs/runner-protocol.md): the Channel that reads and writes frames on
# the descriptor kiqd hands over, or on one seat's socket. The protocol socket's is read by one
# worker thread at a time (the one holding the Server's read lock) and written by every worker
# thread, each whole frame under the write lock; a seat's is read and written by its seat thread
# alone. Part of the hot path: every job arrives through #read_frame and is answered by
# #send_frame.

module KiqdRubyRunner
  MAX_FRAME = 64 * 1024 * 1024

  # The protocol socket: frames of a 4-byte big-endian length and "TYPE[ TAG]\nDATA". Reads and
  # writes each have their own lock: one thread reads a whole frame at a time, one writes.
  class Channel
    def initialize(io)
      @io = io
      @buf = "".b
      @io.binmode
      @io.sync = true
      @write_lock = Mutex.new
      @fds = nil
      @chunk = "".b # each read lands here, then is appended: no 64 KiB string per read
    end

    # From now on, descriptors kiqd attaches to a frame (SCM_RIGHTS: the `seats` frame) are
    # kept for #take_fds. Reads then use recvmsg(2): for the protocol socket only, where frames
    # are rare once the seats are given.
    def accept_fds!
      @fds = []
    end

    # The first `n` descriptors received, as IOs; fewer when fewer came.
    def take_fds(n) = @fds.shift(n)

    def send_frame(type, data)
      body = "#{type}\n".b << data.b
      @write_lock.synchronize { @io.write([body.bytesize].pack("N"), body) }
    end

    def send_json(type, obj)
      send_frame(type, JSON.generate(obj))
    end

    # Worker threads wait for kiqd in read(2) itself: Ruby's default non-blocking descriptors
    # cost a failed read and a ppoll per frame.
    def blocking!
      require "io/nonblock"
      @io.nonblock = false
    rescue LoadError, NotImplementedError
      nil
    end

    # [type, data], or nil at end of file; the caller holds the read lock. What arrives is
    # buffered: a frame usually comes in one read(2) with its length (IO#read(n) would make two).
    def read_frame
      return nil unless fill(4)
      len = @buf.unpack1("N")
      raise "frame of #{len} bytes" if len > MAX_FRAME
      raise "an empty frame (no type)" if len.zero?
      return nil unless fill(4 + len)
      body = @buf.byteslice(4, len)
      @buf = @buf.bytesize == 4 + len ? "".b : @buf.byteslice(4 + len, @buf.bytesize)
      type, data = body.split("\n", 2)
      [type, data || "".b]
    end

    private

    def fill(n)
      while @buf.bytesize < n
        next @buf << @io.readpartial(65536, @chunk) unless @fds
        data, _addr, _flags, *controls = @io.recvmsg(65536, 0, 1024, scm_rights: true)
        return false if data.nil? || data.empty?
        controls.each { |c| @fds.concat(c.unix_rights || []) if c.cmsg_is?(:SOCKET, :RIGHTS) }
        @buf << data
      end
      true
    rescue EOFError
      false
    end
  end
end
