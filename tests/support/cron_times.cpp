// kiqd_cron_times: the differential test's kiqd side (tests/interop/cron_differential.rb). Reads
// lines "<from epoch seconds>\t<schedule>" on stdin and prints, for each, what kiqd makes of the
// schedule as sidekiq-cron reads it (CronExpression::parse_cronish):
//   ok <next> <next after that> <previous> <the cron line a natural-language schedule became>
//   refused <why>
// Times are epoch seconds. One process for thousands of lines, so the comparison takes seconds.
#include <iostream>
#include <string>

#include "cron/cron_expression.hpp"

int main() {
    std::ios::sync_with_stdio(false);
    std::string line;
    while (std::getline(std::cin, line)) {
        const auto tab = line.find('\t');
        if (tab == std::string::npos) {
            std::cout << "refused no tab\n";
            continue;
        }
        const double from = std::stod(line.substr(0, tab));
        try {
            const auto c = kiqd::CronExpression::parse_cronish(line.substr(tab + 1));
            const auto next = c.next_time(from);
            const auto after = c.next_time(static_cast<double>(next));
            const auto previous = c.previous_time(from);
            std::cout << "ok " << next << " " << after << " " << previous << " " << c.natural_cron()
                      << "\n";
        } catch (const std::exception& e) {
            std::cout << "refused " << e.what() << "\n";
        }
    }
    return 0;
}
