// The slots of fugit's natural-language rewrite (see cron_natural_slots.hpp), rule for rule
// as fugit/nat.rb has them.
#include "cron/cron_natural_slots.hpp"

#include <algorithm>
#include <regex>

#include "cron/cron_expression.hpp"

namespace kiqd::nat {
namespace {

// Array#sort of Integers or of Strings; Ruby cannot compare the two.
std::vector<Atom> ruby_sort(std::vector<Atom> a) {
    for (const auto& x : a)
        if (x.num != a.front().num) ruby_error("comparison of String with Integer failed");
    std::sort(a.begin(), a.end(),
              [](const Atom& x, const Atom& y) { return x.num ? x.n < y.n : x.s < y.s; });
    return a;
}

}  // namespace

Atom num(long n) {
    return Atom{true, n, {}};
}
Atom str(std::string s) {
    return Atom{false, 0, std::move(s)};
}

std::string Val::text() const {
    if (kind == nil) return "";
    if (kind == atom) return a.text();
    std::string out = "[";
    for (size_t i = 0; i < arr.size(); ++i)
        out += (i ? ", " : "") + (arr[i].num ? arr[i].text() : "\"" + arr[i].s + "\"");
    return out + "]";
}
Val v(Atom a) {
    Val x;
    x.kind = Val::atom;
    x.a = std::move(a);
    return x;
}
Val v(std::vector<Atom> arr) {
    Val x;
    x.kind = Val::array;
    x.arr = std::move(arr);
    return x;
}
std::vector<Atom> to_array(const Val& x) {  // Kernel#Array
    if (x.kind == Val::nil) return {};
    if (x.kind == Val::atom) return {x.a};
    return x.arr;
}

[[noreturn]] void ruby_error(const std::string& what) {
    throw CronError("fugit cannot read this natural-language line: " + what);
}

std::optional<std::pair<long, long>> Slot::hour_range() const {
    if (key != "hm" || !d1.is(num(0))) return std::nullopt;
    if (d0.kind != Val::atom || d0.a.num) ruby_error("undefined method `match'");
    static const std::regex range_re("^(\\d+)-(\\d+)$");
    std::smatch m;
    if (!std::regex_match(d0.a.s, m, range_re)) return std::nullopt;
    return std::make_pair(std::stol(m[1]), std::stol(m[2]));
}

Val Slot::conflate(int index, const Slot& o) const {
    const Val& a = index == 0 ? d0 : d1;
    const Val& b = index == 0 ? o.d0 : o.d1;
    if (b.kind == Val::nil) return a;
    if (a.kind == Val::nil) return b;
    auto joined = [](std::pair<long, long> r) {
        const long h0 = r.first, h1 = r.second - 1;
        return h0 == h1 ? v(num(h0)) : v(str(std::to_string(h0) + "-" + std::to_string(h1)));
    };
    if (index == 0 && o.strong == 1)
        if (auto ra = hour_range()) return joined(*ra);
    if (index == 0 && strong == 1)
        if (auto rb = o.hour_range()) return joined(*rb);
    if (strong == index || strong == kTrue) return a;
    if (o.strong == index || o.strong == kTrue) return b;
    if (o.weak == index || o.weak == kTrue) return a;
    if (weak == index || weak == kTrue) return b;
    const Atom star = str("*");
    if (a.is(star) && b.is(star)) return v(std::vector<Atom>{star});
    auto to_a = [&](const Val& x) { return x.is(star) ? std::vector<Atom>{} : to_array(x); };
    auto out = to_a(a);
    for (auto& x : to_a(b)) out.push_back(x);
    return v(out);
}
void Slot::append(const Slot& o) {
    Val n0 = conflate(0, o), n1 = conflate(1, o);
    d0 = std::move(n0);
    d1 = std::move(n1);
    weak.reset();
    strong.reset();
}

Slot slot(std::string key, Val d0, Val d1, std::optional<int> weak, std::optional<int> strong) {
    return Slot{std::move(key), std::move(d0), std::move(d1), weak, strong};
}

std::optional<std::string> slots_to_cron(std::vector<Slot> slots) {
    std::vector<Slot> keyed;  // @slots, in insertion order
    std::vector<Slot> hms;
    auto find = [&](const std::string& k) -> Slot* {
        for (auto& s : keyed)
            if (s.key == k) return &s;
        return nullptr;
    };
    for (auto& s : slots) {
        if (s.key == "hm")
            hms.push_back(std::move(s));
        else if (Slot* h = find(s.key))
            h->append(s);
        else
            keyed.push_back(std::move(s));
    }
    if (find("monthday") || find("weekday")) {
        if (hms.empty()) hms.push_back(slot("hm", v(num(0)), v(num(0))));
    } else if (find("month")) {
        if (hms.empty()) hms.push_back(slot("hm", v(num(0)), v(num(0))));
        if (!find("monthday")) keyed.push_back(slot("monthday", v(num(1))));
    }
    // determine_hms, then the first of its crons (sidekiq-cron's :single mode).
    std::vector<Atom> hours, minutes;
    if (hms.empty()) {
        hours = minutes = {str("*")};
    } else {
        for (;;) {
            if (hms.size() < 2) break;
            auto it =
                std::find_if(hms.begin(), hms.end(), [](const Slot& s) { return s.graded(); });
            if (it == hms.end()) break;
            const size_t ig = static_cast<size_t>(it - hms.begin());
            const size_t io = ig == 0 ? 1 : ig - 1;
            Slot other = hms[io];
            hms.erase(hms.begin() + static_cast<long>(io));
            hms[ig == 0 ? 0 : ig - 1].append(other);
        }
        std::vector<std::pair<Atom, std::vector<Atom>>> by_minute;
        for (const auto& hm : hms) {
            const auto [h, m] = hm.a();
            for (const auto& minute : m.arr) {
                auto e = std::find_if(by_minute.begin(), by_minute.end(),
                                      [&](const auto& p) { return p.first == minute; });
                if (e == by_minute.end()) {
                    by_minute.push_back({minute, {}});
                    e = by_minute.end() - 1;
                }
                for (const auto& x : h.arr) e->second.push_back(x);
            }
        }
        std::vector<std::pair<std::vector<Atom>, std::vector<Atom>>> by_hours;
        for (const auto& [minute, hs] : by_minute) {
            const auto sorted = hs.empty() ? hs : ruby_sort(hs);
            auto e = std::find_if(by_hours.begin(), by_hours.end(),
                                  [&](const auto& p) { return p.first == sorted; });
            if (e == by_hours.end()) {
                by_hours.push_back({sorted, {}});
                e = by_hours.end() - 1;
            }
            e->second.push_back(minute);
        }
        if (by_hours.empty()) return std::nullopt;  // [].first: parse_cron(nil) fails
        hours = by_hours.front().first;
        minutes = by_hours.front().second;
    }
    auto field = [&](const std::string& key, Atom def) {
        const Slot* s = find(key);
        return s ? to_array(s->d0) : std::vector<Atom>{def};
    };
    std::vector<std::vector<Atom>> a{field("second", str("0")),
                                     minutes,
                                     hours,
                                     field("monthday", str("*")),
                                     field("month", str("*")),
                                     field("weekday", str("*"))};
    if (const Slot* tz = find("tz")) a.push_back(to_array(tz->d0));
    if (a.front() == std::vector<Atom>{str("0")}) a.erase(a.begin());
    std::string line;
    for (size_t i = 0; i < a.size(); ++i) {
        std::vector<Atom> u;
        for (const auto& x : a[i])
            if (std::find(u.begin(), u.end(), x) == u.end()) u.push_back(x);
        std::stable_sort(u.begin(), u.end(), [](const Atom& x, const Atom& y) {
            return (x.num ? x.n : 999999) < (y.num ? y.n : 999999);
        });
        if (i) line += ' ';
        for (size_t j = 0; j < u.size(); ++j) line += (j ? "," : "") + u[j].text();
    }
    return line;
}

}  // namespace kiqd::nat
