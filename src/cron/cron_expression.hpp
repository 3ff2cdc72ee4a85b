#pragma once
// CronExpression: a cron line as fugit (the parser sidekiq-cron and sidekiq-scheduler use) reads
// it, and the times it fires at, computed the way fugit computes them, so that kiqd and Ruby
// processes agree on every run of a shared schedule — including across daylight-saving changes.
//
// Accepted: 5 fields (minute hour day-of-month month day-of-week) or 6 (seconds first); `*`,
// numbers, `a-b` (wrapping: `22-2` hours), steps (`*/15`, `5/15`, `1-30/7`, `/15`), lists; month
// and weekday names (`jan`, `mon`, case-insensitive); `L`/`last` and negative days of month
// (`-2` = the day before the last); weekday `#n` / `#-n` / `#L` (n-th / n-th last in the month);
// hour 24 = 0, weekday 7 = Sunday; fugit's `&` (day of month AND weekday instead of cron's OR);
// `@yearly @annually @monthly @weekly @daily @midnight @noon @hourly`; an optional trailing
// time zone ("Europe/Berlin", "UTC", "+09:00"); fugit's random `~` (`0~59`, `~`, `10~20/5`: one
// value drawn from a hash of the line, the same in every kiqd process, where fugit draws anew
// at every parse) and its `%` weekday modulo (`mon%2+1`: every other Monday, weeks counted from
// Monday 2018-12-31). Natural-language lines ("every day at noon") are read by CronNatural
// (cron_natural.hpp) into such a line first; parse_cronish() takes either, as sidekiq-cron does.
//
// Without a zone the line is read in the machine's local zone ($TZ, else /etc/localtime), as
// fugit does in a Ruby process. Zones come from the OS tz database through Howard Hinnant's
// date/tz library (Debian's libhowardhinnant-date-dev, USE_OS_TZDB).
//
// Immutable after parse(); safe to share between threads.
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace date {
class time_zone;
}

namespace kiqd {

class CronError : public std::invalid_argument {
  public:
    using std::invalid_argument::invalid_argument;
};

class CronExpression {
  public:
    // Throws CronError with a message saying what is wrong.
    static CronExpression parse(std::string_view text);
    // What sidekiq-cron reads (fugit's parse_cronish): a cron line, else a natural-language
    // schedule ("every day at noon"), as the cron line fugit makes of it.
    static CronExpression parse_cronish(std::string_view text);

    // fugit's previous_time: the latest second, strictly before `from` (epoch seconds, any
    // fraction dropped), at which the expression fires.
    std::int64_t previous_time(double from) const;
    // fugit's next_time: the first second after `from` at which it fires.
    std::int64_t next_time(double from) const;

    const std::string& original() const { return original_; }
    // The cron line a natural-language schedule became ("" for a cron line).
    const std::string& natural_cron() const { return natural_; }
    // The zone the fields are read in ("Europe/Berlin", "+09:00", or the local zone's name).
    std::string zone_name() const;

    // Local wall-clock fields of an instant in this expression's zone (public for tests).
    struct Local {
        int year, month, day, hour, min, sec, wday;  // month 1-12, wday 0 = Sunday
        int offset;                                  // seconds east of UTC
        std::string abbrev;
    };
    Local local(std::int64_t t) const;
    // The instant of a local wall-clock time in this expression's zone: the earliest of two
    // when a clock change repeats it, the change itself when one skips it (sidekiq-scheduler's
    // `at:` times are read through a line's zone).
    std::int64_t instant(int year, int month, int day, int hour, int min, int sec) const;

  private:
    struct Weekday {
        int day;                 // 0-6
        std::optional<int> nth;  // `#n`: 1..5 from the start of the month, -1..-5 from its end
        std::optional<std::pair<int, int>> mod;  // `%n+m`: weeks since 2018-12-31, mod n, == m
    };
    using Field = std::optional<std::vector<int>>;  // nullopt: any value

    bool month_match(const Local& l) const;
    bool day_match(const Local& l) const;
    bool weekday_match(const Local& l) const;
    bool monthday_match(const Local& l) const;
    static bool in(const Field& f, int v);

  public:
    // The value `~` draws: FNV-1a of the line and the draw's rank, modulo n (public for the
    // differential test, which hands fugit the same draws).
    static int pick(const std::string& line, int draw, int n);

  private:
    // The instant of local midnight on the first day of y-m (the first instant after it when a
    // clock change skips it).
    std::int64_t local_midnight(int y, int m, int d, bool* skipped = nullptr) const;

    std::string original_;
    std::string natural_;
    Field seconds_, minutes_, hours_, monthdays_, months_;
    std::optional<std::vector<Weekday>> weekdays_;
    bool day_and_ = false;
    const date::time_zone* zone_ = nullptr;  // null: fixed offset_
    int offset_ = 0;                         // seconds east of UTC, when zone_ is null
    std::string zone_text_;                  // as written, "" when none was
};

}  // namespace kiqd
