#pragma once
// The fields of a cron line as fugit's grammar reads them (fugit/cron.rb, its Parser module and
// its expansion of elements): values and names per field, `a-b` ranges that wrap, steps, lists,
// `L` and negative days, weekday `#n` and `%n+m`, and `~` random picks. CronExpression::parse
// (cron_expression.hpp) splits the line and builds itself from these. Pure functions; any thread.
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiqd::cron_fields {

enum class Kind { sec, min, hour, dom, mon, dow };

// Throws CronError("<field> field '<token>': <why>").
[[noreturn]] void fail(Kind k, std::string_view token, const std::string& why);

// A non-empty string of ASCII digits.
bool all_digits(std::string_view s);

// One element of a field, as fugit's rewrite_elt returns it: [a, z, slash, hash, mod].
struct Element {
    std::optional<int> a, z, slash, hash;
    std::optional<std::pair<int, int>> mod;  // weekday `%n+m`
    bool star = false;
    bool tilde = false;  // `a~z`: fugit's random pick
};
Element parse_element(Kind k, std::string_view text);

// fugit's random(min, max, sta, edn, sla): a value from sta up to edn (wrapping past max), or
// among the first sla when a step is given; `rand(n)` draws one of 0..n-1.
int random_pick(int min, int max, std::optional<int> sta, std::optional<int> edn,
                std::optional<int> sla, const std::function<int(int)>& rand);

// Calls `each` for every item of a comma-separated field (fugit tolerates "1,,2," but not a
// leading comma nor an empty field).
void for_each_item(Kind k, std::string_view token,
                   const std::function<void(std::string_view)>& each);

// fugit's do_determine over a field (seconds to months): the sorted values, nullopt for any.
std::optional<std::vector<int>> determine(Kind k, std::string_view token, int min, int max,
                                          const std::function<int(int)>& rand);

}  // namespace kiqd::cron_fields
