#include "middleware/release_fold.hpp"

#include <iterator>

#include "middleware/limits/concurrency_scripts.hpp"
#include "middleware/unique/lock_keeper.hpp"

namespace kiqd {
namespace {

// ARGV is a list of releases, each a kind and its arguments; KEYS holds each release's two keys
// in the same order:
//   'u' (an EXEC lock): ARGV owner; KEYS the lock, the held-locks hash (LockKeeper's release)
//   'c' (a concurrency slot): ARGV member, limit, slot TTL ms, key prefix; KEYS the slots
//       ZSET, the waiting list (the concurrency release)
// Returns how many releases failed, a scope's slots (a held hash's locks) counting as one (their
// errors are dropped, as a deferred release's reply is).
const std::string& folded_source() {
    static const std::string s = concurrency_script_with(KIQD_LOCK_RELEASE_LUA R"lua(
local k, a, failed = 1, 1, 0
local function count(ok, r)
  if not ok or (type(r) == 'table' and r.err) then failed = failed + 1 end
end
-- Slots are freed per scope: one ZREM for all of a scope's members, then one resume; locks
-- per held hash (release_locks).
local scopes, order = {}, {}
local helds, horder = {}, {}
while a <= #ARGV do
  if ARGV[a] == 'u' then
    local h = helds[KEYS[k + 1]]
    if not h then
      h = {KEYS[k + 1], {}, {}}
      helds[KEYS[k + 1]] = h
      horder[#horder + 1] = h
    end
    h[2][#h[2] + 1] = KEYS[k]
    h[3][#h[3] + 1] = ARGV[a + 1]
    a = a + 2
  else
    local s = scopes[KEYS[k]]
    if not s then
      s = {KEYS[k], KEYS[k + 1], {}, tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), ARGV[a + 4]}
      scopes[KEYS[k]] = s
      order[#order + 1] = s
    end
    s[3][#s[3] + 1] = ARGV[a + 1]
    a = a + 5
  end
  k = k + 2
end
for _, h in ipairs(horder) do count(pcall(release_locks, h[1], h[2], h[3])) end
for _, s in ipairs(order) do count(pcall(release, s[1], s[2], s[3], s[4], s[5], s[6])) end
return failed
)lua");
    return s;
}

// Whether `cmd` calls the script of `sha`/`source` with 2 keys and `args` arguments.
bool calls(const redis::Command& cmd, const std::string& sha, const char* source, size_t args) {
    if (cmd.size() != 5 + args || cmd[2] != "2") return false;
    return (cmd[0] == "EVALSHA" && cmd[1] == sha) || (cmd[0] == "EVAL" && cmd[1] == source);
}

}  // namespace

ReleaseFold::ReleaseFold()
    : lock_release_(LockKeeper::release_script_source()),
      slot_release_(concurrency_release_script()),
      folded_(folded_source()) {}

bool ReleaseFold::loaded(redis::Connection& conn) const {
    try {
        for (const redis::Script* s : {&lock_release_, &slot_release_, &folded_})
            if (s->sha().empty()) s->load(conn);
        return true;
    } catch (const redis::Error&) {
        return false;  // unfolded: each release goes as it is
    }
}

void ReleaseFold::fold(redis::Connection& conn, std::vector<redis::Command>& commands) const {
    if (commands.size() < 2 || !loaded(conn)) return;
    const std::string lock_sha = lock_release_.sha();
    const std::string slot_sha = slot_release_.sha();
    const char* lock_source = LockKeeper::release_script_source();
    const char* slot_source = concurrency_release_script().c_str();
    auto kind = [&](const redis::Command& c) {
        if (calls(c, lock_sha, lock_source, 1)) return 'u';
        if (calls(c, slot_sha, slot_source, 4)) return 'c';
        return ' ';
    };
    size_t releases = 0;
    for (const auto& c : commands) releases += kind(c) != ' ';
    if (releases < 2) return;  // nothing to gain
    std::vector<std::string> keys;
    std::vector<std::string> args;
    std::vector<redis::Command> out(1);
    for (auto& c : commands) {
        const char k = kind(c);
        if (k == ' ') {
            out.push_back(std::move(c));
            continue;
        }
        // `c` is dropped with `commands`: its arguments are moved, not copied.
        keys.push_back(std::move(c[3]));
        keys.push_back(std::move(c[4]));
        args.push_back(std::string(1, k));
        args.insert(args.end(), std::make_move_iterator(c.begin() + 5),
                    std::make_move_iterator(c.end()));
    }
    out[0] = folded_.evalsha_command(std::move(keys), std::move(args));
    commands = std::move(out);
}

}  // namespace kiqd
