// CronExpression (see cron_expression.hpp). The parser follows fugit's grammar (fugit/cron.rb,
// its Parser module) and its expansion of ranges and steps; previous_time/next_time walk a
// cursor over instants exactly as fugit's TimeCursor does (skipping by month, day, hour, minute
// and second, in seconds computed from the local wall clock), because that walk is what decides
// which runs a daylight-saving change skips or repeats — and kiqd must skip or repeat the same
// ones as the Ruby processes sharing the schedule.
#include "cron/cron_expression.hpp"

#include <date/date.h>
#include <date/tz.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
#include <set>

#include "cron/cron_fields.hpp"
#include "cron/cron_natural.hpp"

namespace kiqd {
namespace {

using namespace cron_fields;

std::int64_t floor_div(std::int64_t a, std::int64_t b) {
    return a / b - ((a % b != 0) && ((a < 0) != (b < 0)));
}
std::int64_t floor_mod(std::int64_t a, std::int64_t b) {
    return a - floor_div(a, b) * b;
}

// A fixed zone offset, [-+]([01][0-9]|2[0-4]):?(00|15|30|45): its seconds east of UTC; nullopt
// for anything else (a zone name).
std::optional<int> zone_offset_seconds(std::string_view s) {
    if (s.size() != 5 && s.size() != 6) return std::nullopt;
    if (s[0] != '+' && s[0] != '-') return std::nullopt;
    std::string digits;
    for (size_t i = 1; i < s.size(); ++i)
        if (s[i] != ':')
            digits += s[i];
        else if (i != 3)
            return std::nullopt;
    if (digits.size() != 4 || !all_digits(digits)) return std::nullopt;
    const int h = std::atoi(digits.substr(0, 2).c_str());
    const int m = std::atoi(digits.substr(2).c_str());
    if (h > 24 || (m != 0 && m != 15 && m != 30 && m != 45)) return std::nullopt;
    return (h * 3600 + m * 60) * (s[0] == '-' ? -1 : 1);
}

std::vector<std::string_view> split_ws(std::string_view s) {
    std::vector<std::string_view> out;
    size_t i = 0;
    while (i < s.size()) {
        while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
        size_t j = i;
        while (j < s.size() && s[j] != ' ' && s[j] != '\t') ++j;
        if (j > i) out.push_back(s.substr(i, j - i));
        i = j;
    }
    return out;
}

const date::time_zone* local_zone() {
    // As Ruby (and so et-orbi) reads it: $TZ first, then the system's zone.
    if (const char* tz = std::getenv("TZ"); tz && *tz) {
        std::string name = tz[0] == ':' ? tz + 1 : tz;
        try {
            return date::locate_zone(name);
        } catch (const std::exception&) {
        }
    }
    try {
        return date::current_zone();
    } catch (const std::exception&) {
        return date::locate_zone("Etc/UTC");
    }
}

}  // namespace

CronExpression CronExpression::parse(std::string_view text) {
    CronExpression c;
    c.original_ = std::string(text);
    std::string line(text);
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.front())))
        line.erase(0, 1);
    if (line.empty()) throw CronError("empty cron line");
    if (line[0] == '@') {
        static const std::map<std::string, std::string> specials{
            {"@yearly", "0 0 1 1 *"}, {"@annually", "0 0 1 1 *"}, {"@monthly", "0 0 1 * *"},
            {"@weekly", "0 0 * * 0"}, {"@daily", "0 0 * * *"},    {"@midnight", "0 0 * * *"},
            {"@noon", "0 12 * * *"},  {"@hourly", "0 * * * *"}};
        const auto space = line.find_first_of(" \t");
        const std::string word = line.substr(0, space);
        auto it = specials.find(word);
        if (it == specials.end()) throw CronError("unknown shortcut '" + word + "'");
        line = it->second + (space == std::string::npos ? "" : line.substr(space));
    }
    auto tokens = split_ws(line);
    // fugit tries six fields (seconds first) before five, each with an optional zone.
    auto try_fields = [&](size_t n) -> bool {
        if (tokens.size() != n && tokens.size() != n + 1) return false;
        CronExpression t;
        t.original_ = c.original_;
        size_t i = 0;
        // fugit draws its random values field by field, element by element; so does `rand`.
        int draws = 0;
        const std::function<int(int)> rand = [&](int n) { return pick(c.original_, draws++, n); };
        std::string_view dom = tokens[n - 3], dow = tokens[n - 1];
        if (!dom.empty() && dom.back() == '&') {
            t.day_and_ = true;
            dom.remove_suffix(1);
        }
        if (!dow.empty() && dow.back() == '&') {
            t.day_and_ = true;
            dow.remove_suffix(1);
        }
        try {
            t.seconds_ =
                n == 6 ? determine(Kind::sec, tokens[i++], 0, 59, rand) : std::vector<int>{0};
            t.minutes_ = determine(Kind::min, tokens[i++], 0, 59, rand);
            t.hours_ = determine(Kind::hour, tokens[i++], 0, 23, rand);
            t.monthdays_ = determine(Kind::dom, dom, 1, 31, rand);
            ++i;
            t.months_ = determine(Kind::mon, tokens[i++], 1, 12, rand);
            ++i;
            // fugit's determine_weekdays.
            std::vector<Weekday> wd;
            for_each_item(Kind::dow, dow, [&](std::string_view item) {
                const Element e = parse_element(Kind::dow, item);
                auto add = [&](int d, std::optional<int> nth = {}) {
                    wd.push_back({d > 6 ? d - 7 : d, nth, std::nullopt});
                };
                std::optional<int> a = e.a, z = e.z;
                if (e.tilde) {
                    a = random_pick(0, 6, a, z, e.slash, rand);
                    if (!e.slash) z.reset();
                }
                if (e.hash) {
                    add(*e.a, e.hash);
                } else if (e.mod) {
                    wd.push_back({*e.a > 6 ? *e.a - 7 : *e.a, std::nullopt, e.mod});
                } else if (e.slash) {
                    int zz = z ? *z : (a ? *a : 6);
                    int aa = a.value_or(0);
                    if (aa > zz) zz += 7;
                    for (int d = aa; d <= zz; d += std::max(1, *e.slash)) add(d);
                } else if (z) {
                    int zz = *z;
                    if (*a > zz) zz += 7;
                    for (int d = *a; d <= zz; ++d) add(d);
                } else if (a) {
                    add(*a);
                }
            });
            for (auto& w : wd)
                if (w.day == 7) w.day = 0;
            std::vector<Weekday> unique;
            for (const auto& w : wd)
                if (std::none_of(unique.begin(), unique.end(), [&](const Weekday& u) {
                        return u.day == w.day && u.nth == w.nth && u.mod == w.mod;
                    }))
                    unique.push_back(w);
            // fugit sorts [day, #n] and [day, [mod, plus]] together: Ruby cannot compare a
            // number with a pair, so one day with both a '#' and a '%' fails its parse.
            for (const auto& u : unique)
                for (const auto& w : unique)
                    if (u.day == w.day && u.nth && w.mod)
                        fail(Kind::dow, dow, "one day cannot take both '#' and '%'");
            if (!unique.empty()) t.weekdays_ = std::move(unique);
        } catch (const CronError&) {
            if (n == 6 && tokens.size() == 6) return false;  // may be 5 fields and a zone
            throw;
        }
        if (tokens.size() == n + 1) {
            const std::string_view z = tokens[n];
            t.zone_text_ = std::string(z);
            if (const auto offset = zone_offset_seconds(z)) {
                t.offset_ = *offset;
            } else {
                // fugit's zone names start with a capital ("UTC", "Europe/Berlin"; not "utc").
                if (!std::isupper(static_cast<unsigned char>(z[0])))
                    throw CronError("unknown time zone '" + std::string(z) + "'");
                try {
                    t.zone_ = date::locate_zone(std::string(z));
                } catch (const std::exception&) {
                    throw CronError("unknown time zone '" + std::string(z) + "'");
                }
            }
        } else {
            t.zone_ = local_zone();
        }
        // fugit's compact_month_days: drop days no listed month has (Feb 30); none left is an
        // expression that never fires.
        if (t.months_ && t.monthdays_) {
            static const int kMaxDays[] = {0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
            std::set<int> ms, ds;
            for (int m : *t.months_)
                for (int d : *t.monthdays_)
                    if (d <= kMaxDays[m]) {
                        ms.insert(m);
                        ds.insert(d);
                    }
            if (ms.empty() || ds.empty()) throw CronError("no listed month has the listed days");
            t.months_ = std::vector<int>(ms.begin(), ms.end());
            t.monthdays_ = std::vector<int>(ds.begin(), ds.end());
        }
        c = std::move(t);
        return true;
    };
    if (tokens.size() < 5 || tokens.size() > 7)
        throw CronError("expected 5 or 6 fields and an optional time zone, got " +
                        std::to_string(tokens.size()) + " words");
    if (try_fields(6)) return c;
    if (try_fields(5)) return c;
    throw CronError("expected 5 or 6 fields and an optional time zone");
}

CronExpression CronExpression::parse_cronish(std::string_view text) {
    try {
        return parse(text);
    } catch (const CronError& as_cron) {
        const auto line = natural_cron_line(text);
        if (!line)
            throw CronError(std::string(as_cron.what()) +
                            " (nor is it a natural-language schedule fugit reads)");
        try {
            CronExpression c = parse(*line);
            c.original_ = std::string(text);
            c.natural_ = *line;
            return c;
        } catch (const CronError& e) {
            throw CronError("natural-language schedule read as '" + *line + "': " + e.what());
        }
    }
}

std::string CronExpression::zone_name() const {
    if (!zone_text_.empty()) return zone_text_;
    return zone_ ? std::string(zone_->name()) : "UTC";
}

CronExpression::Local CronExpression::local(std::int64_t t) const {
    using namespace std::chrono;
    int offset = offset_;
    std::string abbrev;
    if (zone_) {
        const auto info = zone_->get_info(date::sys_seconds{seconds{t}});
        offset = static_cast<int>(info.offset.count());
        abbrev = info.abbrev;
    }
    const std::int64_t lt = t + offset;
    const auto days = date::floor<date::days>(date::sys_seconds{seconds{lt}});
    const date::year_month_day ymd{days};
    const std::int64_t sod = lt - duration_cast<seconds>(days.time_since_epoch()).count();
    Local l{};
    l.year = static_cast<int>(ymd.year());
    l.month = static_cast<int>(static_cast<unsigned>(ymd.month()));
    l.day = static_cast<int>(static_cast<unsigned>(ymd.day()));
    l.hour = static_cast<int>(sod / 3600);
    l.min = static_cast<int>(sod % 3600 / 60);
    l.sec = static_cast<int>(sod % 60);
    l.wday = static_cast<int>(date::weekday{days}.c_encoding());
    l.offset = offset;
    l.abbrev = std::move(abbrev);
    return l;
}

std::int64_t CronExpression::local_midnight(int y, int m, int d, bool* skipped) const {
    using namespace std::chrono;
    const date::local_seconds ls{date::local_days{
        date::year{y} / date::month{static_cast<unsigned>(m)} / date::day{static_cast<unsigned>(d)}}
                                     .time_since_epoch()};
    if (skipped) *skipped = false;
    if (!zone_) return ls.time_since_epoch().count() - offset_;
    const auto li = zone_->get_info(ls);
    if (li.result == date::local_info::nonexistent) {
        if (skipped) *skipped = true;
        return li.second.begin.time_since_epoch().count();  // the clock change itself
    }
    return ls.time_since_epoch().count() - li.first.offset.count();  // earliest when ambiguous
}

std::int64_t CronExpression::instant(int year, int month, int day, int hour, int min,
                                     int sec) const {
    const date::local_seconds ls =
        date::local_days{date::year{year} / date::month{static_cast<unsigned>(month)} /
                         date::day{static_cast<unsigned>(day)}} +
        std::chrono::hours{hour} + std::chrono::minutes{min} + std::chrono::seconds{sec};
    if (!zone_) return ls.time_since_epoch().count() - offset_;
    const auto li = zone_->get_info(ls);
    if (li.result == date::local_info::nonexistent)
        return li.second.begin.time_since_epoch().count();
    return ls.time_since_epoch().count() - li.first.offset.count();
}

int CronExpression::pick(const std::string& line, int draw, int n) {
    // FNV-1a (64 bits) of "<line>#<draw>": stable across processes, machines and versions.
    std::uint64_t h = 14695981039346656037ULL;
    const std::string text = line + "#" + std::to_string(draw);
    for (unsigned char ch : text) {
        h ^= ch;
        h *= 1099511628211ULL;
    }
    return static_cast<int>(h % static_cast<std::uint64_t>(n));
}

bool CronExpression::in(const Field& f, int v) {
    return !f || std::binary_search(f->begin(), f->end(), v);
}

bool CronExpression::month_match(const Local& l) const {
    return in(months_, l.month);
}

bool CronExpression::weekday_match(const Local& l) const {
    if (!weekdays_) return true;
    for (const auto& w : *weekdays_) {
        if (w.day != l.wday) continue;
        if (w.mod) {
            // et-orbi's rweek (1.4.2, under fugit 1.14.0): whole weeks between Monday
            // 2018-12-31 and this day's local date, counted in calendar days. (Up to et-orbi
            // 1.4.1 it counted seconds between the two local noons, so a day in daylight-saving
            // time, an hour short, counted one less and its Monday fell in the previous week.)
            const auto days =
                (date::sys_days{date::year{l.year} / date::month{static_cast<unsigned>(l.month)} /
                                date::day{static_cast<unsigned>(l.day)}} -
                 date::sys_days{date::year{2018} / date::December / date::day{31}})
                    .count();
            const auto rweek = floor_div(days, 7);
            const auto m = static_cast<std::int64_t>(w.mod->first);
            if (m == 0) throw CronError("'%0' divides by zero");
            if (floor_mod(rweek, m) == floor_mod(w.mod->second, m)) return true;
            continue;
        }
        if (!w.nth) return true;
        // et-orbi's wday_in_month: weeks counted from the month's start, and from its end.
        const int last = static_cast<int>(static_cast<unsigned>(
            (date::year{l.year} / date::month{static_cast<unsigned>(l.month)} / date::last).day()));
        const int from_start = (l.day - 1) / 7 + 1;
        const int from_end = -((last - l.day) / 7 + 1);
        if (*w.nth == from_start || *w.nth == from_end) return true;
    }
    return false;
}

bool CronExpression::monthday_match(const Local& l) const {
    if (!monthdays_) return true;
    // fugit: the last day is the day of (the next month's first midnight - 24 h), plus one —
    // on a clock change that falls on the month's last day this is off by one, as in fugit.
    const int y = l.month == 12 ? l.year + 1 : l.year;
    const int m = l.month == 12 ? 1 : l.month + 1;
    const int last = local(local_midnight(y, m, 1) - 24 * 3600).day + 1;
    for (int d : *monthdays_)
        if ((d < 1 ? last + d : d) == l.day) return true;
    return false;
}

bool CronExpression::day_match(const Local& l) const {
    if (weekdays_ && monthdays_) {
        if (day_and_) return weekday_match(l) && monthday_match(l);
        return weekday_match(l) || monthday_match(l);  // man 5 crontab: either field
    }
    return weekday_match(l) && monthday_match(l);
}

namespace {
constexpr int kMaxIterations = 2048;  // fugit's MAX_ITERATION_COUNT

std::string wall(const CronExpression::Local& l) {
    return std::to_string(l.year) + "-" + std::to_string(l.month) + "-" + std::to_string(l.day) +
           " " + std::to_string(l.hour) + ":" + std::to_string(l.min) + ":" + std::to_string(l.sec);
}
}  // namespace

std::int64_t CronExpression::previous_time(double from) const {
    std::int64_t t = static_cast<std::int64_t>(std::floor(from - 1));
    for (int i = 0;; ++i) {
        if (i > kMaxIterations) throw CronError("too many loops looking for the previous time");
        const Local l = local(t);
        if (!month_match(l)) {
            t -= (l.day - 1) * 86400LL + l.hour * 3600 + l.min * 60 + l.sec + 1;
            continue;
        }
        if (!day_match(l)) {
            t -= l.hour * 3600 + l.min * 60 + l.sec + 1;
            continue;
        }
        if (!in(hours_, l.hour)) {
            t -= l.min * 60 + l.sec + 1;
            continue;
        }
        if (!in(minutes_, l.min)) {
            t -= l.sec + 1;
            continue;
        }
        if (!in(seconds_, l.sec)) {
            int target = seconds_->back();
            for (auto it = seconds_->rbegin(); it != seconds_->rend(); ++it)
                if (*it < l.sec) {
                    target = *it;
                    break;
                }
            t += target - l.sec - (l.sec > target ? 0 : 60);
            continue;
        }
        return t;
    }
}

std::int64_t CronExpression::next_time(double from_seconds) const {
    std::int64_t from = static_cast<std::int64_t>(std::floor(from_seconds));
    // fugit compares the wall clock of a match with `from` written in from's own zone — UTC for
    // every caller here — to avoid yielding the same literal time twice across a clock change.
    auto utc_wall = [](std::int64_t t) {
        CronExpression utc;
        utc.offset_ = 0;
        return wall(utc.local(t));
    };
    std::string sfrom = utc_wall(from);
    std::int64_t t = from;
    const Local start = local(t);
    std::string zfrom = std::to_string(start.offset) + start.abbrev;
    for (int i = 0;; ++i) {
        if (i > kMaxIterations) throw CronError("too many loops looking for the next time");
        if (t == from) {
            t += 1;
            continue;
        }
        const Local l = local(t);
        if (!month_match(l)) {
            const int y = l.month == 12 ? l.year + 1 : l.year;
            const int m = l.month == 12 ? 1 : l.month + 1;
            t = local_midnight(y, m, 1);
            continue;
        }
        if (!day_match(l)) {
            t += (24 - l.hour) * 3600 - l.min * 60 - l.sec;
            const Local n = local(t);
            if (n.hour == 0) continue;
            if (n.hour < 12) {
                bool skipped = false;
                const std::int64_t midnight = local_midnight(n.year, n.month, n.day, &skipped);
                t = skipped ? t + (24 - n.hour) * 3600 : midnight;
            } else {
                t += (24 - n.hour) * 3600;
            }
            continue;
        }
        if (!in(hours_, l.hour)) {
            t += (60 - l.min) * 60 - l.sec;
            continue;
        }
        if (!in(minutes_, l.min)) {
            t += 60 - l.sec;
            continue;
        }
        if (!in(seconds_, l.sec)) {
            auto it = std::upper_bound(seconds_->begin(), seconds_->end(), l.sec);
            t += it != seconds_->end() ? *it - l.sec : 60 - l.sec + seconds_->front();
            continue;
        }
        const std::string st = wall(l);
        const std::string zt = std::to_string(l.offset) + l.abbrev;
        if (st == sfrom && zt != zfrom) {
            from = t;
            sfrom = st;
            zfrom = zt;
            continue;
        }
        return t;
    }
}

}  // namespace kiqd
