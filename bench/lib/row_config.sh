# Sourced by the bench scripts that drain one row (middleware_row.sh, unique_gem_rows.sh):
# row_yml FETCH [SNIPPET] prints a kiqd config for the private Redis at $redis_url: queue
# `default`, logging at warn, basic fetch or (FETCH batched) reliable fetch in batches of 50,
# then the YAML file SNIPPET if given.
row_yml() {
    local fetch=$1 snippet=${2:-}
    echo "redis: {url: \"$redis_url\"}"
    echo "queues: [default]"
    echo "logging: {level: warn}"
    if [[ $fetch == batched ]]; then
        echo "fetch: reliable"
        echo "reliable_fetch: {batch_size: 50}"
    fi
    if [[ -n $snippet ]]; then cat "$snippet"; fi
}
