#pragma once
// cron_flag_set: how sidekiq-cron reads its on/off job fields (active_job, date_as_argument):
// true, or a string matching /^(true|t|yes|y|1)$/i; anything else is off. One definition for
// the config (schedule entries in YAML) and the cron poller (the job hashes in Redis), so both
// read a flag as the gem does. A pure function; any thread.
#include <cctype>
#include <string>
#include <string_view>

namespace kiqd {

inline bool cron_flag_set(std::string_view value) {
    std::string v(value);
    for (auto& c : v) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return v == "true" || v == "t" || v == "yes" || v == "y" || v == "1";
}

}  // namespace kiqd
