// natural_cron_line (see cron_natural.hpp): fugit/nat.rb, rule by rule. The parser keeps
// raabro's semantics: `rex` matches at the cursor with the leftmost, ordered alternation of a
// backtracking regex (ECMAScript's, as Ruby's); `seq` fails whole; `alt` takes the first
// success; `rep` is greedy without backtracking; `jseq` gives back a trailing separator. Only
// named nodes are kept (raabro's unnamed ones are transparent to its lookups), so the rewrite
// walks the tree fugit's does.
#include "cron/cron_natural.hpp"

#include <algorithm>
#include <cctype>
#include <regex>
#include <vector>

#include "cron/cron_expression.hpp"
#include "cron/cron_natural_slots.hpp"

namespace kiqd {
namespace {

using namespace nat;

// ---- the parser

struct Node {
    std::string name;
    size_t off = 0, len = 0;
    std::vector<Node> kids;
};
using Out = std::vector<Node>;

const std::vector<std::string>& sixties() {
    static const std::vector<std::string> s = [] {
        const std::vector<std::string> one_to_nine{"one", "two",   "three", "four", "five",
                                                   "six", "seven", "eight", "nine"};
        std::vector<std::string> out{"zero"};
        out.insert(out.end(), one_to_nine.begin(), one_to_nine.end());
        for (const char* t : {"ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen",
                              "sixteen", "seventeen", "eighteen", "nineteen"})
            out.push_back(t);
        for (const char* tens : {"twenty", "thirty", "forty", "fifty"}) {
            out.push_back(tens);
            for (const auto& b : one_to_nine) out.push_back(std::string(tens) + "-" + b);
        }
        return out;
    }();
    return s;
}

// NHOURS / NMINUTES / OMONTHDAYS, in their Ruby hashes' insertion order.
const std::vector<std::pair<std::string, Atom>>& nhour_table() {
    static const auto h = [] {
        std::vector<std::pair<std::string, Atom>> out;
        for (long i = 0; i < 13; ++i) out.push_back({sixties()[static_cast<size_t>(i)], num(i)});
        out.push_back({"midnight", num(0)});
        out.push_back({"oh", num(0)});
        out.push_back({"noon", num(12)});
        return out;
    }();
    return h;
}
const std::vector<std::pair<std::string, Atom>>& nminute_table() {
    static const auto h = [] {
        std::vector<std::pair<std::string, Atom>> out;
        for (size_t i = 0; i < sixties().size(); ++i)
            out.push_back({sixties()[i], num(static_cast<long>(i))});
        out.push_back({"o'clock", num(0)});
        out.push_back({"hundred", num(0)});
        return out;
    }();
    return h;
}
const std::vector<std::pair<std::string, Atom>>& omonthday_table() {
    static const auto h = [] {
        std::vector<std::pair<std::string, Atom>> out{
            {"1st", num(1)},   {"2nd", num(2)},   {"3rd", num(3)},   {"21st", num(21)},
            {"22nd", num(22)}, {"23rd", num(23)}, {"31st", num(31)}, {"last", str("L")}};
        auto set = [&](const std::string& k, Atom a) {
            for (auto& kv : out)
                if (kv.first == k) return void(kv.second = a);
            out.push_back({k, a});
        };
        for (long i = 4; i <= 30; ++i) set(std::to_string(i) + "th", num(i));
        const char* words[] = {"first",        "second",        "third",          "fourth",
                               "fifth",        "sixth",         "seventh",        "eighth",
                               "ninth",        "tenth",         "eleventh",       "twelfth",
                               "thirteenth",   "fourteenth",    "fifteenth",      "sixteenth",
                               "seventeenth",  "eighteenth",    "nineteenth",     "twentieth",
                               "twenty-first", "twenty-second", "twenty-third",   "twenty-fourth",
                               "twenty-fifth", "twenty-sixth",  "twenty-seventh", "twenty-eighth",
                               "twenty-ninth", "thirtieth",     "thirty-first"};
        for (long i = 0; i < 31; ++i) set(words[i], num(i + 1));
        return out;
    }();
    return h;
}

std::string keys_alternation(const std::vector<std::pair<std::string, Atom>>& h) {
    std::string out;
    for (const auto& kv : h) out += (out.empty() ? "" : "|") + kv.first;
    return out;
}

std::optional<Atom> lookup(const std::vector<std::pair<std::string, Atom>>& h,
                           const std::string& k) {
    for (const auto& kv : h)
        if (kv.first == k) return kv.second;
    return std::nullopt;
}

std::string downcase(std::string s) {
    for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
}
std::string strip(const std::string& s) {
    const auto b = s.find_first_not_of(" \t\r\n\f\v");
    if (b == std::string::npos) return "";
    return s.substr(b, s.find_last_not_of(" \t\r\n\f\v") - b + 1);
}

const char* const kWeekdays[] = {"sunday",   "monday", "tuesday", "wednesday",
                                 "thursday", "friday", "saturday"};

std::regex re(const std::string& pattern, bool icase = false) {
    return std::regex(pattern,
                      icase ? std::regex::ECMAScript | std::regex::icase : std::regex::ECMAScript);
}

class NatParser {
  public:
    explicit NatParser(std::string input) : in_(std::move(input)) {}

    // Parser.parse(s): the whole input, else nothing.
    std::optional<Node> parse() {
        Out out;
        if (!nat(out) || pos_ != in_.size() || out.size() != 1) return std::nullopt;
        return out.front();
    }
    std::string string(const Node& n) const { return in_.substr(n.off, n.len); }

  private:
    using Fn = bool (NatParser::*)(Out&);
    struct Part {
        Fn f;
        char q = 0;  // 0, '?' or '*'
    };

    bool wrap(Out& out, const char* name, size_t start, Out&& kids) {
        if (name)
            out.push_back(Node{name, start, pos_ - start, std::move(kids)});
        else
            for (auto& k : kids) out.push_back(std::move(k));
        return true;
    }
    bool rex(Out& out, const char* name, const std::regex& r) {
        std::smatch m;
        const auto begin = in_.cbegin() + static_cast<long>(pos_);
        if (!std::regex_search(begin, in_.cend(), m, r, std::regex_constants::match_continuous))
            return false;
        const size_t start = pos_;
        pos_ += static_cast<size_t>(m.length(0));
        return wrap(out, name, start, {});
    }
    bool seq(Out& out, const char* name, std::initializer_list<Part> parts) {
        const size_t start = pos_;
        Out kids;
        for (const auto& p : parts) {
            if (p.q == 0) {
                if (!(this->*p.f)(kids)) {
                    pos_ = start;
                    return false;
                }
                continue;
            }
            for (int count = 0; p.q == '*' || count < 1; ++count) {
                const size_t before = pos_;
                if (!(this->*p.f)(kids) || pos_ == before) break;
            }
        }
        return wrap(out, name, start, std::move(kids));
    }
    bool alt(Out& out, const char* name, std::initializer_list<Fn> parsers) {
        const size_t start = pos_;
        for (Fn f : parsers) {
            Out kids;
            if ((this->*f)(kids)) return wrap(out, name, start, std::move(kids));
            pos_ = start;
        }
        return false;
    }
    bool jseq(Out& out, const char* name, Fn elt, Fn sep) {
        const size_t start = pos_;
        Out kids;
        int count = 0;
        size_t sep_pos = 0, sep_size = 0;  // where the last separator began
        for (bool on_elt = true;; on_elt = !on_elt) {
            const size_t before_pos = pos_, before_size = kids.size();
            if (!(this->*(on_elt ? elt : sep))(kids)) {
                pos_ = before_pos;
                kids.resize(before_size);
                if (on_elt && count > 0) {  // give back the separator
                    pos_ = sep_pos;
                    kids.resize(sep_size);
                }
                break;
            }
            if (!on_elt) {
                sep_pos = before_pos;
                sep_size = before_size;
            }
            ++count;
        }
        if (count < 1) {
            pos_ = start;
            return false;
        }
        return wrap(out, name, start, std::move(kids));
    }

    // -- fugit's rules, bottom to top
#define REX(fn, name, ...)                           \
    bool fn(Out& o) {                                \
        static const std::regex r = re(__VA_ARGS__); \
        return rex(o, name, r);                      \
    }
    REX(_every, nullptr, "[ \\t]*every[ \\t]+", true)
    REX(_from, nullptr, "[ \\t]*from[ \\t]+", true)
    REX(_at, nullptr, "[ \\t]*at[ \\t]+", true)
    REX(_on, nullptr, "[ \\t]*on[ \\t]+", true)
    REX(_to, nullptr, "[ \\t]*to[ \\t]+", true)
    REX(_and, nullptr, "[ \\t]*and[ \\t]+", true)
    REX(_and_or_or, nullptr, "[ \\t]*(and|or)[ \\t]+", true)
    REX(_in_or_on, nullptr, "(in|on)[ \\t]+", true)
    REX(_and_or_or_or_comma, nullptr, "[ \\t]*(,[ \\t]*)?((and|or)[ \\t]+|,[ \\t]*)", true)
    REX(_to_or_dash, nullptr, "[ \\t]*-[ \\t]*|[ \\t]+(to|through)[ \\t]+", true)
    REX(_day_s, nullptr, "[ \\t]*days?[ \\t]+", true)
    REX(_the, nullptr, "[ \\t]*the[ \\t]+", true)
    REX(_space, nullptr, "[ \\t]+")
    REX(_sep, nullptr, "([ \\t]+|[ \\t]*,[ \\t]*)")
    REX(count, "count", "\\d+")
    REX(omonthday, "omonthday", keys_alternation(omonthday_table()), true)
    REX(monthday, "monthday", "3[0-1]|[0-2]?[0-9]")
    REX(weekday, "weekday",
        "(sunday|monday|tuesday|wednesday|thursday|friday|saturday|sun|mon|tue|wed|thu|fri|sat)"
        "(?=($|[-, \\t]))",
        true)
    REX(_minute, nullptr, "[ \\t]*minute[ \\t]+", true)
    REX(_dmin, "dmin", "[0-5]?[0-9]")
    REX(on_thex, "on_thex", "[ \\t]*the[ \\t]+(hour|minute)[ \\t]*", true)
    REX(city_tz, nullptr, "[A-Z][a-zA-Z0-9+\\-]+(/[A-Z][a-zA-Z0-9+\\-_]+){0,2}")
    REX(named_tz, nullptr, "Z|UTC")
    REX(delta_tz, nullptr, "[-+]([01][0-9]|2[0-4])(:?(00|15|30|45))?")
    REX(ampm, "ampm", "[ \\t]*(am|AM|pm|PM|[Nn]oon|[Mm]idday|[Mm]idnight)")
    REX(dark, "dark", "[ \\t]*dark", true)
    REX(digital_h, "digital_h", "(2[0-4]|[0-1]?[0-9]):([0-5][0-9])", true)
    REX(simple_h, "simple_h", "24|23|22|21|20|19|18|17|16|15|14|13|12|11|10|9|8|7|6|5|4|3|2|1|0")
    REX(named_m, "named_m", keys_alternation(nminute_table()), true)
    REX(named_h, "named_h", keys_alternation(nhour_table()), true)
    REX(_point, "point", "(minutes?|mins?|seconds?|secs?|hours?|hou|h)[ \\t]+", true)
    REX(interval, "interval", "[ \\t]*(seconds?|minutes?|hours?|days?|months?|sec|min|s|m|h|d|M)")
    REX(every_single_interval, "every_single_interval", "(1[ \\t]+)?(week|year)")
    REX(otm, nullptr, "[ \\t]+of the month")
    REX(every_named, "every_named", "weekday", true)
#undef REX

    bool omonthdays(Out& o) {
        return jseq(o, nullptr, &NatParser::omonthday, &NatParser::_and_or_or_or_comma);
    }
    bool monthdays(Out& o) {
        return jseq(o, nullptr, &NatParser::monthday, &NatParser::_and_or_or_or_comma);
    }
    bool weekdays(Out& o) {
        return jseq(o, "weekdays", &NatParser::weekday, &NatParser::_and_or_or_or_comma);
    }
    bool on_the(Out& o) {
        return seq(o, nullptr, {{&NatParser::_the}, {&NatParser::omonthdays}});
    }
    bool and_dmin(Out& o) {
        return seq(
            o, nullptr,
            {{&NatParser::_and_or_or_or_comma}, {&NatParser::_minute, '?'}, {&NatParser::_dmin}});
    }
    bool on_minutes(Out& o) {
        return seq(o, "on_minutes",
                   {{&NatParser::_minute}, {&NatParser::_dmin}, {&NatParser::and_dmin, '*'}});
    }
    bool on_thes(Out& o) {
        return jseq(o, "on_thes", &NatParser::on_the, &NatParser::_and_or_or_or_comma);
    }
    bool on_days(Out& o) {
        return seq(o, "on_days", {{&NatParser::_day_s}, {&NatParser::monthdays}});
    }
    bool on_weekdays(Out& o) {
        if (!weekdays(o)) return false;
        o.back().name = "on_weekdays";  // ren
        return true;
    }
    bool on_object(Out& o) {
        return alt(o, nullptr,
                   {&NatParser::on_days, &NatParser::on_weekdays, &NatParser::on_minutes,
                    &NatParser::on_thes, &NatParser::on_thex});
    }
    bool on_objects(Out& o) {
        return jseq(o, nullptr, &NatParser::on_object, &NatParser::_and);
    }
    bool on(Out& o) {
        return seq(o, "on", {{&NatParser::_on}, {&NatParser::on_objects}});
    }
    bool tz(Out& o) {
        return alt(o, "tz", {&NatParser::city_tz, &NatParser::named_tz, &NatParser::delta_tz});
    }
    bool tzone(Out& o) {
        return seq(o, nullptr, {{&NatParser::_in_or_on, '?'}, {&NatParser::tz}});
    }
    bool digital_hour(Out& o) {
        return seq(o, "digital_hour", {{&NatParser::digital_h}, {&NatParser::ampm, '?'}});
    }
    bool simple_hour(Out& o) {
        return seq(o, "simple_hour", {{&NatParser::simple_h}, {&NatParser::ampm, '?'}});
    }
    bool named_min(Out& o) {
        return seq(o, nullptr, {{&NatParser::_space}, {&NatParser::named_m}});
    }
    bool named_hour(Out& o) {
        return seq(o, "named_hour",
                   {{&NatParser::named_h},
                    {&NatParser::dark, '?'},
                    {&NatParser::named_min, '?'},
                    {&NatParser::ampm, '?'}});
    }
    bool counts(Out& o) {
        return jseq(o, nullptr, &NatParser::count, &NatParser::_and_or_or_or_comma);
    }
    bool at_p(Out& o) {
        return seq(o, "at_p", {{&NatParser::_point}, {&NatParser::counts}});
    }
    bool at_point(Out& o) {
        return jseq(o, nullptr, &NatParser::at_p, &NatParser::_and_or_or);
    }
    bool at_object(Out& o) {
        return alt(o, nullptr,
                   {&NatParser::named_hour, &NatParser::digital_hour, &NatParser::simple_hour,
                    &NatParser::at_point});
    }
    bool at_objects(Out& o) {
        return jseq(o, nullptr, &NatParser::at_object, &NatParser::_and_or_or_or_comma);
    }
    bool at(Out& o) {
        return seq(o, "at", {{&NatParser::_at, '?'}, {&NatParser::at_objects}});
    }
    bool every_interval(Out& o) {
        return seq(o, "every_interval", {{&NatParser::count, '?'}, {&NatParser::interval}});
    }
    bool to_weekday(Out& o) {
        return seq(o, "to_weekday",
                   {{&NatParser::weekday}, {&NatParser::_to_or_dash}, {&NatParser::weekday}});
    }
    bool weekday_range(Out& o) {
        return alt(o, nullptr, {&NatParser::to_weekday, &NatParser::weekdays});
    }
    bool to_omonthday(Out& o) {
        return seq(o, "to_omonthday",
                   {{&NatParser::_the, '?'},
                    {&NatParser::omonthday},
                    {&NatParser::_to},
                    {&NatParser::_the, '?'},
                    {&NatParser::omonthday}});
    }
    bool to_hour(Out& o) {
        return seq(o, "to_hour",
                   {{&NatParser::at_object}, {&NatParser::_to}, {&NatParser::at_object}});
    }
    bool from_object(Out& o) {
        return alt(o, nullptr,
                   {&NatParser::to_weekday, &NatParser::to_omonthday, &NatParser::to_hour});
    }
    bool from_objects(Out& o) {
        return jseq(o, nullptr, &NatParser::from_object, &NatParser::_and_or_or);
    }
    bool from(Out& o) {
        return seq(o, nullptr, {{&NatParser::_from, '?'}, {&NatParser::from_objects}});
    }
    bool every_weekday(Out& o) {
        return jseq(o, nullptr, &NatParser::weekday_range, &NatParser::_and_or_or);
    }
    bool every_of_the_month(Out& o) {
        return seq(o, nullptr, {{&NatParser::omonthdays}, {&NatParser::otm}});
    }
    bool every_object(Out& o) {
        return alt(
            o, nullptr,
            {&NatParser::every_weekday, &NatParser::every_of_the_month, &NatParser::every_interval,
             &NatParser::every_named, &NatParser::every_single_interval});
    }
    bool every_objects(Out& o) {
        return jseq(o, nullptr, &NatParser::every_object, &NatParser::_and_or_or);
    }
    bool every(Out& o) {
        return seq(o, "every", {{&NatParser::_every}, {&NatParser::every_objects}});
    }
    bool nat_elt(Out& o) {
        return alt(o, nullptr,
                   {&NatParser::every, &NatParser::from, &NatParser::at, &NatParser::tzone,
                    &NatParser::on});
    }
    bool nat(Out& o) {
        return jseq(o, "nat", &NatParser::nat_elt, &NatParser::_sep);
    }

    std::string in_;
    size_t pos_ = 0;
};

// ---- the rewrite (fugit's rewrite_* methods)

class NatRewriter {
  public:
    explicit NatRewriter(const NatParser& p) : p_(p) {}

    std::vector<Slot> rewrite(const Node& t) const {
        const std::string& n = t.name;
        if (n == "nat" || n == "on" || n == "at") return subs(t);
        if (n == "every") {
            const Node* s = sublookup(t, "");
            return s ? rewrite(*s) : std::vector<Slot>{};
        }
        if (n == "on_minutes") {
            std::string mins;
            for (const Node* d : gather(t, "dmin")) mins += (mins.empty() ? "" : ",") + strinp(*d);
            return {slot("hm", v(str("*")), v(str(mins)), {}, 1)};
        }
        if (n == "on_thex") {
            if (downcase(string(t)).find("hour") != std::string::npos)
                return {slot("hm", v(num(0)), v(str("*")), {}, 0)};
            return {slot("hm", v(str("*")), v(str("*")), {}, 1)};
        }
        if (n == "on_thes") return subs(t, "omonthday");
        if (n == "on_days") return subs(t, "monthday");
        if (n == "monthday") return {slot("monthday", v(num(std::stol(string(t)))))};
        if (n == "omonthday")
            return {slot("monthday", v(*lookup(omonthday_table(), downcase(string(t)))))};
        if (n == "at_p") {
            std::string pt = downcase(strinp(*sublookup(t, "point")));
            pt = pt.rfind("mon", 0) == 0 ? "M" : pt.substr(0, 1);
            std::vector<Atom> pts;
            for (const Node* c : gather(t, "count")) pts.push_back(num(std::stol(string(*c))));
            if (pt == "m") return {slot("hm", v(str("*")), v(pts), {}, 1)};
            if (pt == "s") return {slot("second", v(pts))};
            return {slot(pt, v(pts))};
        }
        if (n == "every_single_interval") {
            if (string(t).find("year") != std::string::npos)
                return {slot("month", v(num(1)), {}, kTrue),
                        slot("monthday", v(num(1)), {}, kTrue)};
            return {slot("weekday", v(num(0)), {}, kTrue)};
        }
        if (n == "every_interval") return every_interval(t);
        if (n == "every_named") return {slot("weekday", v(str("1-5")), {}, kTrue)};
        if (n == "tz") return {slot("tz", v(str(string(t))))};
        if (n == "weekdays" || n == "on_weekdays") {
            std::vector<Atom> days;
            for (const Node* w : gather(t, "weekday")) days.push_back(weekday(*w));
            return {slot("weekday", v(days))};
        }
        if (n == "to_weekday") {
            const auto w = gather(t, "weekday");
            return {slot("weekday", v(str(weekday(*w[0]).text() + "-" + weekday(*w[1]).text())))};
        }
        if (n == "to_omonthday") {
            const auto d = subs(t, "omonthday");
            return {slot("monthday", v(str(d[0].d0.text() + "-" + d[1].d0.text())))};
        }
        if (n == "digital_hour") {
            const std::string hm = downcase(strinp(*sublookup(t, "digital_h")));
            const auto colon = hm.find(':');
            const long h = std::stol(hm.substr(0, colon)), m = std::stol(hm.substr(colon + 1));
            const Node* ap = sublookup(t, "ampm");
            return {slot("hm", adjust_h(v(num(h)), ap ? downcase(strinp(*ap)) : ""), v(num(m)))};
        }
        if (n == "simple_hour") {
            const auto parts = gather(t, "");
            const long h = std::stol(downcase(strinp(*parts[0])));
            const std::string ap = parts.size() > 1 ? downcase(strinp(*parts[1])) : "";
            return {slot("hm", adjust_h(v(num(h)), ap), v(num(0)))};
        }
        if (n == "named_hour") return named_hour(t);
        if (n == "to_hour") {
            const auto both = gather(t, "");
            const auto h0 = rewrite(*both[0]), h1 = rewrite(*both[1]);
            if (h0.size() != 1 || h1.size() != 1) ruby_error("undefined method `data1'");
            if (to_array(h0[0].d1) != to_array(h1[0].d1))
                throw CronError("cannot deal with " + strinp(*both[0]) + " to " + strinp(*both[1]) +
                                ", minutes diverge");
            return {slot("hm", v(str(h0[0].d0.text() + "-" + h1[0].d0.text())), v(num(0)), {}, 0)};
        }
        ruby_error("no rewrite for " + n);
    }

  private:
    std::string string(const Node& t) const { return p_.string(t); }
    std::string strinp(const Node& t) const { return strip(string(t)); }

    // Tree#sublookup / #subgather: the first named descendants ("" = any name).
    static const Node* sublookup(const Node& t, const std::string& name) {
        for (const auto& c : t.kids) {
            if (name.empty() || c.name == name) return &c;
            if (const Node* n = sublookup(c, name)) return n;
        }
        return nullptr;
    }
    static void gather_into(const Node& t, const std::string& name, std::vector<const Node*>& acc) {
        for (const auto& c : t.kids) {
            if (name.empty() || c.name == name)
                acc.push_back(&c);
            else
                gather_into(c, name, acc);
        }
    }
    static std::vector<const Node*> gather(const Node& t, const std::string& name) {
        std::vector<const Node*> acc;
        gather_into(t, name, acc);
        return acc;
    }
    std::vector<Slot> subs(const Node& t, const std::string& name = "") const {
        std::vector<Slot> out;
        for (const Node* c : gather(t, name))
            for (auto& s : rewrite(*c)) out.push_back(std::move(s));
        return out;
    }

    Atom weekday(const Node& t) const {
        const std::string d = downcase(string(t).substr(0, 3));
        for (long i = 0; i < 7; ++i)
            if (d == std::string(kWeekdays[i]).substr(0, 3)) return num(i);
        ruby_error("unknown weekday");
    }

    // adjust_h: the 12-hour clock's am, pm, noon and midnight.
    static Val adjust_h(const Val& h, const std::string& ap) {
        if (h.kind != Val::atom || !h.a.num) {
            if (ap == "pm") ruby_error("undefined method `<' for nil");
            return h;
        }
        if (ap == "midnight" && h.a.n == 12) return v(num(24));
        if (ap == "pm" && h.a.n < 12) return v(num(h.a.n + 12));
        if (ap == "am" && h.a.n == 12) return v(num(0));
        return h;
    }

    std::vector<Slot> every_interval(const Node& t) const {
        std::vector<std::string> ci;
        for (const Node* c : gather(t, "")) ci.push_back(string(*c));
        std::string i = strip(ci.back()).substr(0, 3);
        ci.pop_back();
        const std::string c = ci.empty() ? "1" : strip(ci.back());
        i = (i == "M" || downcase(i) == "mon") ? "M" : downcase(i.substr(0, 1));
        const std::string cc = c == "1" ? "*" : "*/" + c;
        if (i == "M") return {slot("month", v(str(cc)))};
        if (i == "d") return {slot("monthday", v(str(cc)), {}, kTrue)};
        if (i == "h") return {slot("hm", v(str(cc)), v(num(0)), 1)};
        if (i == "m") return {slot("hm", v(str("*")), v(str(cc)), {}, 1)};
        if (i == "s") return {slot("second", v(str(cc)))};
        ruby_error("wrong number of arguments");  // fugit returns {} here, then fails on it
    }

    std::vector<Slot> named_hour(const Node& t) const {
        const Node* ht = sublookup(t, "named_h");
        const Node* mt = sublookup(t, "named_m");
        const Node* apt = sublookup(t, "ampm");
        // fugit looks the words up as written: "Noon" is no key of its (lower-case) tables.
        const auto h = lookup(nhour_table(), strinp(*ht));
        Val m = v(num(0));
        if (mt) {
            const std::string word = strinp(*mt);
            const auto found = lookup(nminute_table(), word);
            m = found ? v(*found) : v(str(word));
        }
        const Val hv = h ? v(*h) : Val{};
        return {slot("hm", adjust_h(hv, apt ? downcase(strinp(*apt)) : ""), m)};
    }

    const NatParser& p_;
};

}  // namespace

std::optional<std::string> natural_cron_line(std::string_view text) {
    const std::string s = strip(std::string(text));
    if (s.size() > 256) return std::nullopt;  // fugit's MAX_INPUT_LENGTH
    NatParser parser(s);
    const auto tree = parser.parse();
    if (!tree) return std::nullopt;
    return slots_to_cron(NatRewriter(parser).rewrite(*tree));
}

}  // namespace kiqd
