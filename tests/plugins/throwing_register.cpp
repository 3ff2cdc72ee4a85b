// A plugin whose register function throws: startup stops with exit 78 and the message.
#include <stdexcept>

#include "kiqd/plugin.hpp"

KIQD_PLUGIN(handlers, middleware) {
    throw std::runtime_error("missing IMAGE_BUCKET setting");
}
