// A plugin that claims another ABI version: kiqd must refuse it (exit 78, naming it).
#include "kiqd/plugin.hpp"

#undef KIQD_PLUGIN_ABI_VERSION
#define KIQD_PLUGIN_ABI_VERSION 999

KIQD_PLUGIN(handlers, middleware) {
    handlers.add("Never::Registered", [](const kiqd::Job&, kiqd::JobContext&) {});
}
