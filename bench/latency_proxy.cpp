// latency_proxy: a loopback TCP proxy that adds a fixed delay to every Redis round trip, the
// condition of Sidekiq's own published benchmark (1 ms of latency to Redis). Used by bench/run,
// and by bench/chaos.sh to inject network faults.
//
//   latency_proxy LISTEN_PORT UPSTREAM_PORT [DELAY_US=1000] [control]
//
// Listens on 127.0.0.1:LISTEN_PORT and forwards each connection to 127.0.0.1:UPSTREAM_PORT.
// Bytes from the client are held for DELAY_US before they are forwarded (a delay line: reading
// goes on meanwhile, so pipelined commands are not serialised and order is kept); replies go
// back at once. So each request/reply round trip costs DELAY_US more, whatever its size.
// With `control`, commands come on stdin, one per line:
//   delay US   the delay from now on, for open connections too
//   cut        closes every open connection (both sides), as a network cut would
//   down       cuts, and closes each new connection at once until `up`: Redis unreachable
//   up         accepts connections again
// Prints "ready" on stdout once listening. One thread (Boost.Asio); stops on SIGTERM/SIGINT (or
// end of stdin with `control`).
// clang-format off
#include <array>
#include <utility>  // first: Boost 1.74's awaitable.hpp uses std::exchange without it
// clang-format on

#include <unistd.h>

#include <boost/asio.hpp>
#include <chrono>
#include <cstdio>
#include <deque>
#include <functional>
#include <iostream>
#include <list>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace asio = boost::asio;
using asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

// What the control commands change (the io thread only).
struct Settings {
    std::chrono::microseconds delay;
    bool down = false;
    // Every connection's two sockets, to cut them; closed ones are dropped as they are seen.
    std::list<std::weak_ptr<tcp::socket>> sockets;
};

// One direction of one connection: reads from `from`, writes to `to` after `delay` (null: none).
class Pipe : public std::enable_shared_from_this<Pipe> {
  public:
    Pipe(std::shared_ptr<tcp::socket> from, std::shared_ptr<tcp::socket> to, const Settings* delay)
        : from_(std::move(from)), to_(std::move(to)), delay_(delay), timer_(to_->get_executor()) {}

    void start() { read(); }

  private:
    struct Chunk {
        Clock::time_point due;
        std::vector<char> bytes;
    };

    void read() {
        auto self = shared_from_this();
        from_->async_read_some(asio::buffer(buf_), [self](boost::system::error_code ec, size_t n) {
            if (ec) return self->close();
            self->queue_.push_back({Clock::now() + self->delay(),
                                    std::vector<char>(self->buf_.begin(), self->buf_.begin() + n)});
            if (self->queue_.size() == 1) self->schedule();
            self->read();
        });
    }

    void schedule() {
        if (queue_.empty() || writing_) return;
        auto self = shared_from_this();
        if (queue_.front().due <= Clock::now()) return write();
        timer_.expires_at(queue_.front().due);
        timer_.async_wait([self](boost::system::error_code ec) {
            if (!ec) self->write();
        });
    }

    void write() {
        if (queue_.empty() || writing_) return;
        writing_ = true;
        // Everything already due goes out in one write.
        const auto now = Clock::now();
        out_.clear();
        while (!queue_.empty() && queue_.front().due <= now) {
            out_.insert(out_.end(), queue_.front().bytes.begin(), queue_.front().bytes.end());
            queue_.pop_front();
        }
        auto self = shared_from_this();
        asio::async_write(*to_, asio::buffer(out_), [self](boost::system::error_code ec, size_t) {
            self->writing_ = false;
            if (ec) return self->close();
            self->schedule();
        });
    }

    void close() {
        boost::system::error_code ignored;
        from_->close(ignored);
        to_->close(ignored);
        timer_.cancel();
    }

    std::chrono::microseconds delay() const {
        return delay_ ? delay_->delay : std::chrono::microseconds(0);
    }

    std::shared_ptr<tcp::socket> from_, to_;
    const Settings* delay_;
    asio::steady_timer timer_;
    std::array<char, 65536> buf_{};
    std::deque<Chunk> queue_;
    std::vector<char> out_;
    bool writing_ = false;
};

void accept_loop(tcp::acceptor& acceptor, tcp::endpoint upstream, Settings& settings) {
    acceptor.async_accept(
        [&acceptor, upstream, &settings](boost::system::error_code ec, tcp::socket client) {
            if (ec) return;
            auto c = std::make_shared<tcp::socket>(std::move(client));
            if (settings.down) {
                boost::system::error_code ignored;
                c->close(ignored);
                return accept_loop(acceptor, upstream, settings);
            }
            auto s = std::make_shared<tcp::socket>(acceptor.get_executor());
            s->async_connect(upstream, [c, s, &settings](boost::system::error_code ec2) {
                if (ec2) return;
                c->set_option(tcp::no_delay(true));
                s->set_option(tcp::no_delay(true));
                settings.sockets.push_back(c);
                settings.sockets.push_back(s);
                std::make_shared<Pipe>(c, s, &settings)->start();
                std::make_shared<Pipe>(s, c, nullptr)->start();
            });
            accept_loop(acceptor, upstream, settings);
        });
}

void cut_all(Settings& settings) {
    for (auto& weak : settings.sockets)
        if (auto socket = weak.lock()) {
            boost::system::error_code ignored;
            socket->shutdown(tcp::socket::shutdown_both, ignored);
            socket->close(ignored);
        }
    settings.sockets.clear();
}

// Reads control commands from stdin, one line at a time.
void control_loop(asio::posix::stream_descriptor& in, asio::streambuf& buf, Settings& settings,
                  const std::function<void()>& stop) {
    asio::async_read_until(in, buf, '\n', [&in, &buf, &settings, stop](auto ec, size_t) {
        if (ec) return stop();  // end of stdin: the controller is gone
        std::istream lines(&buf);
        std::string line, word;
        std::getline(lines, line);
        std::istringstream words(line);
        words >> word;
        if (word == "delay") {
            long us = 0;
            words >> us;
            settings.delay = std::chrono::microseconds(us);
        } else if (word == "cut") {
            cut_all(settings);
        } else if (word == "down") {
            settings.down = true;
            cut_all(settings);
        } else if (word == "up") {
            settings.down = false;
        }
        std::printf("ok %s\n", line.c_str());
        std::fflush(stdout);
        control_loop(in, buf, settings, stop);
    });
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 3) {
        std::cerr << "usage: latency_proxy LISTEN_PORT UPSTREAM_PORT [DELAY_US=1000] [control]\n";
        return 64;
    }
    const auto listen_port = static_cast<unsigned short>(std::stoi(argv[1]));
    const auto upstream_port = static_cast<unsigned short>(std::stoi(argv[2]));
    Settings settings{std::chrono::microseconds(argc > 3 ? std::stol(argv[3]) : 1000)};
    const bool control = argc > 4 && std::string(argv[4]) == "control";
    asio::io_context io;
    const auto loopback = asio::ip::make_address("127.0.0.1");
    tcp::acceptor acceptor(io, tcp::endpoint(loopback, listen_port));
    asio::signal_set signals(io, SIGINT, SIGTERM);
    signals.async_wait([&](auto, int) { io.stop(); });
    accept_loop(acceptor, tcp::endpoint(loopback, upstream_port), settings);
    asio::posix::stream_descriptor in(io);
    asio::streambuf buf;
    if (control) {
        in.assign(::dup(0));
        control_loop(in, buf, settings, [&io] { io.stop(); });
    }
    std::printf("ready\n");
    std::fflush(stdout);
    io.run();
    return 0;
}
