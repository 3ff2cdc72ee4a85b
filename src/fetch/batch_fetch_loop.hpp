#pragma once
// KIQD_BATCH_FETCH_LOOP: the main loop of the fair fetch script (fair_fetch.cpp): takes jobs,
// walks the queue orders and flags suspects. Kept apart from that script's fair-queue logic,
// which it calls through take(). The script defines before it:
//
//   n        the number of queues (KEYS[1..n]; KEYS[n+1..2n] their working lists when moving;
//            KEYS[2n+1] the suspects set, optional)
//   orders   how many queue orders ARGV holds, each of n entries (1-based queue indexes, 0 =
//            padding), job j using order j mod orders
//   first    the ARGV index just before the first order
//   take(q, dest)  the next job of queue q, moved into `dest` (a working list) or popped when
//            `dest` is false; false when the queue has none
//   finish   nil, or a function run once before the script returns (the fair fetch script
//            writes back there the ring steps it has taken)
//
// ARGV[1] is how many jobs to take. The loop returns {q, payload, ...} (q negated for a
// suspect), stopping at the first job that finds every queue of its order empty.
// Text only: included by the components whose scripts use it.

#define KIQD_BATCH_FETCH_LOOP                                                          \
    "local move = #KEYS > n\n"                                                         \
    "local suspects = KEYS[2 * n + 1]\n"                                               \
    "if suspects and redis.call('exists', suspects) == 0 then suspects = nil end\n"    \
    "local want = tonumber(ARGV[1])\n"                                                 \
    "local out = {}\n"                                                                 \
    "for j = 0, want - 1 do\n"                                                         \
    "  local base = first + (j % orders) * n\n"                                        \
    "  local got = false\n"                                                            \
    "  for k = 1, n do\n"                                                              \
    "    local q = tonumber(ARGV[base + k])\n"                                         \
    "    if q > 0 then\n"                                                              \
    "      local job = take(q, move and KEYS[n + q])\n"                                \
    "      if job then\n"                                                              \
    "        if suspects and redis.call('srem', suspects, job) == 1 then q = -q end\n" \
    "        out[#out + 1] = q\n"                                                      \
    "        out[#out + 1] = job\n"                                                    \
    "        got = true\n"                                                             \
    "        break\n"                                                                  \
    "      end\n"                                                                      \
    "    end\n"                                                                        \
    "  end\n"                                                                          \
    "  if not got then break end\n"                                                    \
    "end\n"                                                                            \
    "if finish then finish() end\n"                                                    \
    "return out\n"
