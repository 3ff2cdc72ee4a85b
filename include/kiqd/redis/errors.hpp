#pragma once
// Typed Redis errors. Connection maps every hiredis failure to one of these in
// one place (throw_context_error), so callers choose a policy by type:
// IoError/ClosedError/ProtocolError/AuthError mean "this connection is broken, reconnect";
// ReplyError means "the server said no" and the connection is still usable.
#include <stdexcept>
#include <string>

namespace kiqd::redis {

class Error : public std::runtime_error {
    using std::runtime_error::runtime_error;
};
class IoError : public Error {  // the connection is broken; the next command reconnects
    using Error::Error;
};
class TimeoutError : public IoError {  // client-side read/connect timeout
    using IoError::IoError;
};
class ClosedError : public IoError {  // the server closed the socket
    using IoError::IoError;
};
class ProtocolError : public IoError {  // garbage on the wire or an unexpected reply type
    using IoError::IoError;
};
// The server refused kiqd's credentials (WRONGPASS, or NOAUTH: it wants a password kiqd does
// not send). An IoError, so callers keep their reconnect-with-backoff policy (the password may
// be fixed on the server side); the message says what to check and never contains a password.
class AuthError : public IoError {
    using IoError::IoError;
};
class ReplyError : public Error {  // "-ERR …", "-NOSCRIPT …": the connection stays usable
  public:
    using Error::Error;
    bool starts_with(std::string_view prefix) const {
        return std::string_view(what()).substr(0, prefix.size()) == prefix;
    }
};

}  // namespace kiqd::redis
