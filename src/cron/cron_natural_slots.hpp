#pragma once
// The values and slots of fugit's natural-language rewrite (fugit/nat.rb: Nat::Slot and
// Nat::SlotGroup), used by cron_natural.cpp: Ruby's nil / Integer / String / Array as fugit's
// slots hold them, the merge of two slots (conflate), and the cron line a group of slots makes
// (determine_hms, then parse_cron's string). Where fugit's Ruby raises (a method on the wrong
// type, Integers compared with Strings) these throw CronError. Pure functions; any thread.
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kiqd::nat {

struct Atom {
    bool num = false;
    long n = 0;
    std::string s;
    bool operator==(const Atom& o) const { return num == o.num && (num ? n == o.n : s == o.s); }
    std::string text() const { return num ? std::to_string(n) : s; }
};
Atom num(long n);
Atom str(std::string s);

struct Val {
    enum Kind { nil, atom, array } kind = nil;
    Atom a;
    std::vector<Atom> arr;
    bool is(const Atom& x) const { return kind == atom && a == x; }
    std::string text() const;  // "#{v}"
};
Val v(Atom a);
Val v(std::vector<Atom> arr);
std::vector<Atom> to_array(const Val& x);  // Kernel#Array

[[noreturn]] void ruby_error(const std::string& what);

constexpr int kTrue = -1;  // an option given as a symbol (:weak) is `true`, else 0 or 1

struct Slot {
    std::string key;
    Val d0, d1;
    std::optional<int> weak, strong;

    bool graded() const { return weak || strong; }  // 0 is truthy in Ruby
    std::pair<Val, Val> a() const { return {v(to_array(d0)), v(to_array(d1))}; }
    std::optional<std::pair<long, long>> hour_range() const;
    Val conflate(int index, const Slot& o) const;
    void append(const Slot& o);
};

Slot slot(std::string key, Val d0, Val d1 = {}, std::optional<int> weak = {},
          std::optional<int> strong = {});

// SlotGroup.new(slots).to_crons(multi: false): the first cron line, nullopt when none.
std::optional<std::string> slots_to_cron(std::vector<Slot> slots);

}  // namespace kiqd::nat
