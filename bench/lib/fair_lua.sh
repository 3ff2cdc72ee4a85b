# Sourced by the fair fetch benches: pieces of the fetch script's Lua, cut out of
# src/fetch/fair_fetch.cpp (and the type guard out of src/redis/lua_type_guard.hpp), so that a
# bench runs the code that ships rather than a copy of it. Each prints the piece, or a message on
# stderr and returns 1 when its markers have moved (CI's smoke run of the benches catches that).
fair_lua_src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/src

# fair_lua_from_scan_to FUNC: from the tenant scan's first comment to the end of `local function
# FUNC` (tenant_of: the scan alone; split: the scan and the split).
fair_lua_from_scan_to() {
    local out
    out=$(awk -v fn="$1" '/^-- The job.s tenant: a string/ {p = 1} p {print}
        $0 ~ "^local function " fn "\\(" {q = 1} q && /^end$/ {exit}' "$fair_lua_src/fetch/fair_fetch.cpp")
    grep -q "^local function $1(" <<<"$out" || { echo "fair_lua: $1 not found in fair_fetch.cpp" >&2; return 1; }
    printf '%s\n' "$out"
}

# fair_lua_type_guard: wrong_type(checks), as KIQD_LUA_TYPE_GUARD puts it in front of the script.
fair_lua_type_guard() {
    local out
    out=$(sed -n '/^#define KIQD_LUA_TYPE_GUARD/,/^[^ ]/ s/^ *"\(.*\)\\n" *\\\{0,1\}$/\1/p' \
        "$fair_lua_src/redis/lua_type_guard.hpp" | sed 's/\\"/"/g; s/\\\\/\\/g')
    grep -q '^local function wrong_type' <<<"$out" || { echo "fair_lua: wrong_type not found" >&2; return 1; }
    printf '%s\n' "$out"
}
