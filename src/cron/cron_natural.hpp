#pragma once
// natural_cron_line: fugit's natural-language schedules (Fugit::Nat, fugit 1.13), which
// sidekiq-cron accepts wherever it takes a cron line — "every 5 minutes", "every day at 5pm",
// "every monday at noon Europe/Paris", "every weekday at 9:30", "on the 1st at 10:00" … — turned
// into the cron line fugit makes of them ("0 17 * * *"), which CronExpression then reads.
//
// It is a port of fugit's grammar (a raabro PEG: ordered choices, greedy repetitions, the same
// regular expressions with the same ordered alternations) and of its rewrite into slots and
// their merge, so that odd phrasings come out as fugit makes them, refusals included ("every 5
// minutes at 17:00" fails in fugit, and here). Like sidekiq-cron's default (`:single` parsing),
// a phrase that names several times keeps the first cron line fugit would list.
//
// A pure function; any thread.
#include <optional>
#include <string>
#include <string_view>

namespace kiqd {

// The cron line, or nullopt when `text` is not one of fugit's natural-language schedules.
// Throws CronError where fugit raises (for instance "minutes diverge" in "from 8:30 to 17:00").
std::optional<std::string> natural_cron_line(std::string_view text);

}  // namespace kiqd
