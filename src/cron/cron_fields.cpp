// The fields of a cron line (see cron_fields.hpp), following fugit 1.13's Parser and its
// determine_* and expand methods.
#include "cron/cron_fields.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <map>
#include <set>

#include "cron/cron_expression.hpp"

namespace kiqd::cron_fields {
namespace {

const char* kind_name(Kind k) {
    switch (k) {
        case Kind::sec:
            return "seconds";
        case Kind::min:
            return "minutes";
        case Kind::hour:
            return "hours";
        case Kind::dom:
            return "day of month";
        case Kind::mon:
            return "month";
        case Kind::dow:
            return "day of week";
    }
    return "?";
}

}  // namespace

void fail(Kind k, std::string_view token, const std::string& why) {
    throw CronError(std::string(kind_name(k)) + " field '" + std::string(token) + "': " + why);
}

namespace {

std::string lower(std::string_view s) {
    std::string out(s);
    for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
}

}  // namespace

bool all_digits(std::string_view s) {
    return !s.empty() &&
           std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

namespace {

// One value of a field, as fugit's value regexes accept it (mos, hou, dom, mon, dow).
std::optional<int> value_of(Kind k, std::string_view v) {
    static const std::map<std::string, int> months{
        {"jan", 1}, {"feb", 2}, {"mar", 3}, {"apr", 4},  {"may", 5},  {"jun", 6},
        {"jul", 7}, {"aug", 8}, {"sep", 9}, {"oct", 10}, {"nov", 11}, {"dec", 12}};
    static const std::map<std::string, int> days{{"sun", 0}, {"mon", 1}, {"tue", 2}, {"wed", 3},
                                                 {"thu", 4}, {"fri", 5}, {"sat", 6}};
    const std::string l = lower(v);
    switch (k) {
        case Kind::sec:
        case Kind::min:  // [0-5]?\d
            if (!all_digits(v) || v.size() > 2 || (v.size() == 2 && v[0] > '5')) return {};
            return std::atoi(l.c_str());
        case Kind::hour: {  // 2[0-4]|[01]?[0-9]
            if (!all_digits(v) || v.size() > 2) return {};
            const int h = std::atoi(l.c_str());
            if (v.size() == 2 && v[0] == '2' && h > 24) return {};
            if (v.size() == 2 && v[0] > '2') return {};
            return h;
        }
        case Kind::dom: {  // -?(3[01]|[12][0-9]|0?[1-9])|last|l
            if (l == "l" || l == "last") return -1;
            std::string_view d = v;
            const bool negative = !d.empty() && d[0] == '-';
            if (negative) d.remove_prefix(1);
            if (!all_digits(d) || d.size() > 2) return {};
            const int n = std::atoi(std::string(d).c_str());
            if (n < 1 || n > 31) return {};
            return negative ? -n : n;
        }
        case Kind::mon: {  // 1[0-2]|0?[1-9]|jan..dec
            if (auto it = months.find(l); it != months.end()) return it->second;
            if (!all_digits(v) || v.size() > 2) return {};
            const int n = std::atoi(l.c_str());
            if (n < 1 || n > 12) return {};
            return n;
        }
        case Kind::dow: {  // [0-7]|sun..sat
            if (auto it = days.find(l); it != days.end()) return it->second;
            if (v.size() != 1 || v[0] < '0' || v[0] > '7') return {};
            return v[0] - '0';
        }
    }
    return {};
}

// One element of a field, as fugit's rewrite_elt returns it: [a, z, slash, hash].

// fugit's random(min, max, sta, edn, sla): a value from sta up to edn (wrapping past max), or
// among the first sla when a step is given. fugit draws it with Ruby's Random, again at every
// parse; kiqd draws it from a hash of the line, so every kiqd process and restart picks the same
// value (CronExpression::pick).
}  // namespace

int random_pick(int min, int max, std::optional<int> sta, std::optional<int> edn,
                std::optional<int> sla, const std::function<int(int)>& rand) {
    const int a = sta.value_or(min);
    const int z = edn.value_or(max);
    int n = z - a + 1;
    if (n <= 0) n = max - min + 1 + n;
    if (sla && *sla < n) n = *sla;
    int r = a + rand(n);
    if (r > max) r = r + min - max - 1;
    return r;
}

namespace {

std::optional<int> slash_value(std::string_view s) {  // \d\d?
    if (!all_digits(s) || s.size() > 2) return {};
    return std::atoi(std::string(s).c_str());
}

}  // namespace

Element parse_element(Kind k, std::string_view text) {
    Element e;
    std::string_view rest = text;
    if (k == Kind::dow) {
        if (auto p = rest.find('%'); p != std::string_view::npos) {
            // fugit's mod_dow: a weekday, then %n or %n+m (weeks counted from 2018-12-31).
            auto day = value_of(k, rest.substr(0, p));
            std::string_view m = rest.substr(p + 1);
            const auto plus = m.find('+');
            const std::string_view n = m.substr(0, plus);
            const std::string_view o = plus == std::string_view::npos ? "0" : m.substr(plus + 1);
            if (!day) fail(k, text, "not a day of the week");
            if (!all_digits(n) || !all_digits(o) || n.size() > 6 || o.size() > 6)
                fail(k, text, "'%' takes a number, then optionally + and a number");
            // `%0` parses (as in fugit) and fails on the first day it is checked against.
            const int mod = std::atoi(std::string(n).c_str());
            e.a = *day;
            e.mod = std::make_pair(mod, std::atoi(std::string(o).c_str()));
            return e;
        }
        if (auto h = rest.find('#'); h != std::string_view::npos) {
            auto day = value_of(k, rest.substr(0, h));
            const std::string nth = lower(rest.substr(h + 1));
            int n = 0;
            if (nth == "l" || nth == "last") {
                n = -1;
            } else {
                std::string_view d = nth;
                const bool negative = !d.empty() && d[0] == '-';
                if (negative) d.remove_prefix(1);
                if (d.size() != 1 || d[0] < '1' || d[0] > '5')
                    fail(k, text, "'#' takes 1 to 5, -1 to -5 or L");
                n = (d[0] - '0') * (negative ? -1 : 1);
            }
            if (!day) fail(k, text, "not a day of the week");
            e.a = *day;
            e.hash = n;
            return e;
        }
    }
    if (auto s = rest.find('/'); s != std::string_view::npos) {
        e.slash = slash_value(rest.substr(s + 1));
        if (!e.slash) fail(k, text, "a step is '/' and one or two digits");
        rest = rest.substr(0, s);
        if (rest.empty()) return e;  // "/15" alone: every 15th from the start
    }
    if (rest == "*") {
        e.star = true;
        return e;
    }
    if (auto t = rest.find('~'); t != std::string_view::npos) {
        e.tilde = true;
        const std::string_view a = rest.substr(0, t), z = rest.substr(t + 1);
        if (!a.empty() && !(e.a = value_of(k, a))) fail(k, text, "not a valid value before '~'");
        if (!z.empty() && !(e.z = value_of(k, z))) fail(k, text, "not a valid value after '~'");
        return e;
    }
    // a or a-b; a day of month may itself be negative ("-5", "1--5" is not meant to be read).
    size_t hyphen = rest.find('-', k == Kind::dom && !rest.empty() && rest[0] == '-' ? 1 : 0);
    auto a = value_of(k, rest.substr(0, hyphen));
    if (!a) fail(k, text, "not a valid value");
    e.a = a;
    if (hyphen != std::string_view::npos) {
        auto z = value_of(k, rest.substr(hyphen + 1));
        if (!z) fail(k, text, "not a valid range end");
        e.z = z;
    }
    return e;
}

namespace {

// fugit's Cron#range: from sta to edn (wrapping past max back to min), every sla-th value.
// nullopt stands for fugit's [nil]: the whole range, i.e. any value.
std::optional<std::vector<int>> range(Kind k, std::string_view token, int min, int max, int sta,
                                      int edn, int sla) {
    if (sta == min && edn == max && sla == 1) return std::nullopt;
    if ((sta < 0 && edn > 0) || (edn < 0 && sta > 0))
        fail(k, token, "both start and end must be negative");
    const int omax = max;
    if (sta < 0) {
        min = -max;
        max = -1;
    }
    std::vector<int> a;
    int cur = sta;
    for (;;) {
        a.push_back(cur);
        if (cur == edn) break;
        cur += 1;
        if (cur > max) {
            cur = min;
            if (edn > max) edn = edn - max - 1;
        }
        if (static_cast<int>(a.size()) > 2 * omax) fail(k, token, "this range never ends");
    }
    std::vector<int> out;
    for (size_t i = 0; i < a.size(); i += static_cast<size_t>(sla))
        if (std::find(out.begin(), out.end(), a[i]) == out.end()) out.push_back(a[i]);
    return out;
}

// Calls `each` for every item of a comma-separated field. fugit tolerates doubled and trailing
// commas ("1,,2,"), not a leading one, nor a field without any item.
}  // namespace

void for_each_item(Kind k, std::string_view token,
                   const std::function<void(std::string_view)>& each) {
    size_t start = 0, count = 0;
    while (start <= token.size()) {
        size_t comma = token.find(',', start);
        if (comma == std::string_view::npos) comma = token.size();
        const std::string_view item = token.substr(start, comma - start);
        if (item.empty() && start == 0) fail(k, token, "starts with a comma");
        start = comma + 1;
        if (item.empty()) continue;
        ++count;
        each(item);
    }
    if (count == 0) fail(k, token, "empty");
}

// fugit's do_determine over a comma-separated list (seconds to months), each element through
// fugit's expand.
std::optional<std::vector<int>> determine(Kind k, std::string_view token, int min, int max,
                                          const std::function<int(int)>& rand) {
    std::set<int> values;
    bool any = false;
    for_each_item(k, token, [&](std::string_view item) {
        const Element e = parse_element(k, item);
        if (e.slash && *e.slash < 1) fail(k, item, "a step must be at least 1");
        std::optional<int> sta = e.a, edn = e.z;
        const std::optional<int> sla = e.slash;
        if (e.tilde) {
            sta = random_pick(min, max, sta, edn, sla, rand);
            if (!sla) edn.reset();
        }
        if (sla && !edn) edn = max;
        if (!sta && !edn && !sla) {
            any = true;
            return;
        }
        if (sta && !edn) {
            values.insert(k == Kind::hour && *sta == 24 ? 0 : *sta);
            return;
        }
        const int s = sta.value_or(min);
        int z = *edn;
        if (z < 0 && s > 0) z = max;
        auto r = range(k, item, min, max, s, z, sla.value_or(1));
        if (!r) {
            any = true;
            return;
        }
        for (int v : *r) values.insert(k == Kind::hour && v == 24 ? 0 : v);
    });
    if (any) return std::nullopt;
    return std::vector<int>(values.begin(), values.end());
}

}  // namespace kiqd::cron_fields
