#pragma once
// KIQD_LUA_TYPE_GUARD: a Lua function put in front of every script that writes more than one
// key, so that the script can check the types of the keys it will write before its first write.
// Redis does not roll back a script that fails half-way: the writes before the failing command
// stay. A script that ZREMs a job and then LPUSHes it onto a key holding a string (WRONGTYPE)
// loses the job. With the guard, such a script writes nothing and answers one error reply
// instead, which names the key:
//
//   WRONGTYPE <key> holds a <type>, not a <expected type>; nothing was written
//
//   local refused = wrong_type({KEYS[2], 'set', KEYS[3], 'list'})
//   if refused then return refused end
//
// wrong_type(checks) takes pairs of a key and the type the script needs it to be ('list',
// 'set', 'zset', 'hash', 'string'); a missing key passes (the write creates it). It returns the
// error reply for the first key of another type, nil when all pass. It cannot check that a
// string holds an integer (INCRBY): scripts that need that check it themselves.
// Text only: included by the components whose scripts use it.

#define KIQD_LUA_TYPE_GUARD                                                             \
    "local function wrong_type(checks)\n"                                               \
    "  for i = 1, #checks, 2 do\n"                                                      \
    "    local t = redis.call('type', checks[i]).ok\n"                                  \
    "    if t ~= 'none' and t ~= checks[i + 1] then\n"                                  \
    "      return redis.error_reply('WRONGTYPE ' .. checks[i] .. ' holds a ' .. t ..\n" \
    "        ', not a ' .. checks[i + 1] .. '; nothing was written')\n"                 \
    "    end\n"                                                                         \
    "  end\n"                                                                           \
    "  return nil\n"                                                                    \
    "end\n"
