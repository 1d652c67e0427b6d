#!/usr/bin/env bash
# Smoke test of `courier serve` with curl: plans, hits, reset, items, cursor, conditional, limited.
# Run from anywhere: crates/courier-faultserver/tests/smoke.sh
set -euo pipefail

cd "$(dirname "$0")/../../.."
command -v curl >/dev/null || { echo "smoke: curl is required" >&2; exit 1; }

work=$(mktemp -d)
pid=""
cleanup() {
    if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

fail() {
    echo "smoke: FAIL: $*" >&2
    [[ -f "$work/err" ]] && sed 's/^/  server: /' "$work/err" >&2
    exit 1
}

expect_eq() { # actual expected what
    [[ "$1" == "$2" ]] || fail "$3: expected '$2', got '$1'"
}

expect_match() { # text regex what
    [[ "$1" =~ $2 ]] || fail "$3: '$1' does not match /$2/"
}

cargo build -q -p courier-cli
cargo run -q -p courier-cli -- serve --port 0 >"$work/out" 2>"$work/err" &
pid=$!

url=""
for _ in $(seq 1 300); do
    url=$(sed -n 's/^listening on \(http:\/\/127\.0\.0\.1:[0-9]*\)$/\1/p' "$work/out")
    [[ -n "$url" ]] && break
    kill -0 "$pid" 2>/dev/null || fail "the server exited before listening"
    sleep 0.1
done
[[ -n "$url" ]] || fail "the server did not print its URL within 30 s"
curl -sf --max-time 5 --retry 20 --retry-connrefused --retry-delay 0 "$url/" >/dev/null ||
    fail "the server does not answer at $url"
echo "smoke: server at $url"

c() { curl -s --max-time 10 "$@"; }

# Plans: 503 twice with Retry-After, then 201, then 200 once used up.
resp=$(c -X POST "$url/__plan/orders" -H 'content-type: application/json' \
    -d '{"plan": [{"status": 503, "headers": {"retry-after": "2"}, "times": 2}, {"status": 201, "body": "made"}]}')
expect_match "$resp" '"requests":3' "plan accepted"
expect_eq "$(c -o /dev/null -w '%{http_code}' "$url/s/orders")" 503 "first answer"
expect_match "$(c -i "$url/s/orders?a=1" | tr -d '\r')" $'(^|\n)retry-after: 2(\n|$)' "Retry-After sent as given"
expect_eq "$(c "$url/s/orders")" "made" "third answer body"
expect_eq "$(c -o /dev/null -w '%{http_code}' -X POST -H 'Idempotency-Key: k-42' "$url/s/orders")" 200 "plan used up"

# Hits: four, with method, query and the idempotency key.
hits=$(c "$url/__hits/orders")
expect_eq "$(grep -o '"t_ms"' <<<"$hits" | wc -l | tr -d ' ')" 4 "hit count"
expect_match "$hits" '"query":"a=1"' "query recorded"
expect_match "$hits" '"method":"POST","path":"/s/orders","query":null,"idempotency_key":"k-42"' "idempotency key recorded"

# Bad plans: 400 with a reason; the server keeps serving.
expect_eq "$(c -o /dev/null -w '%{http_code}' -X POST "$url/__plan/bad" -d '{"plan": [{"status": 1000}]}')" 400 "status out of range"
expect_match "$(c -X POST "$url/__plan/bad" -d '{"plan": [{"stauts": 503}]}')" 'unknown field `stauts`' "unknown field named"
expect_match "$(c -X POST "$url/__plan/bad" -d '{"plan": [')" 'not valid' "malformed JSON"

# DELETE clears plan and hits.
c -X POST "$url/__plan/orders" -d '{"plan": [{"status": 500, "times": 3}]}' >/dev/null
c -X DELETE "$url/__plan/orders" >/dev/null
expect_eq "$(c "$url/__hits/orders")" '{"hits":[]}' "hits cleared"
expect_eq "$(c -o /dev/null -w '%{http_code}' "$url/s/orders")" 200 "plan cleared"

# Reset: no status at all, curl reports a transport failure.
c -X POST "$url/__plan/r" -d '{"plan": [{"reset": true}]}' >/dev/null
set +e
code=$(c -o /dev/null -w '%{http_code}' "$url/s/r")
rc=$?
set -e
expect_eq "$code" 000 "no status on a reset"
[[ $rc -ne 0 ]] || fail "curl succeeded on a reset"
expect_eq "$(c -o /dev/null -w '%{http_code}' "$url/s/r")" 200 "serving after a reset"

# h2c with prior knowledge.
if curl -V | grep -q HTTP2; then
    expect_eq "$(c --http2-prior-knowledge -o /dev/null -w '%{http_version} %{http_code}' "$url/items")" "2 200" "h2c"
fi

# Items: per_page capped at 10, Link next and last; no next on the last page.
head=$(c -D - -o /dev/null "$url/items?per_page=50" | tr -d '\r')
expect_match "$head" 'link: </items\?page=2&per_page=10>; rel="next", </items\?page=3&per_page=10>; rel="last"' "Link header"
expect_eq "$(c "$url/items?page=3")" '[{"id":21},{"id":22},{"id":23}]' "last page"
[[ "$(c -D - -o /dev/null "$url/items?page=3")" != *'rel="next"'* ]] || fail "rel=next on the last page"

# Cursor: follow next_cursor to the end.
body=$(c "$url/cursor?limit=10")
cursor=$(sed -n 's/.*"next_cursor":"\([^"]*\)".*/\1/p' <<<"$body")
[[ -n "$cursor" ]] || fail "no next_cursor in $body"
body=$(c "$url/cursor?limit=10&cursor=$cursor")
cursor=$(sed -n 's/.*"next_cursor":"\([^"]*\)".*/\1/p' <<<"$body")
expect_match "$(c "$url/cursor?limit=10&cursor=$cursor")" '\{"id":23\}\],"next_cursor":null' "cursor end"
expect_eq "$(c -o /dev/null -w '%{http_code}' "$url/cursor?cursor=garbage")" 400 "bad cursor"

# Conditional: 200 spends quota, 304 does not, POST changes the ETag.
head=$(c -D - -o /dev/null "$url/conditional" | tr -d '\r')
etag=$(sed -n 's/^etag: //p' <<<"$head")
remaining=$(sed -n 's/^x-ratelimit-remaining: //p' <<<"$head")
[[ -n "$etag" && -n "$remaining" ]] || fail "ETag or quota missing: $head"
head=$(c -D - -o /dev/null -H "If-None-Match: $etag" "$url/conditional" | tr -d '\r')
expect_match "$head" '^HTTP/1.1 304' "revalidation"
expect_eq "$(sed -n 's/^x-ratelimit-remaining: //p' <<<"$head")" "$remaining" "a 304 is free"
c -X POST "$url/conditional" >/dev/null
head=$(c -D - -o /dev/null -H "If-None-Match: $etag" "$url/conditional" | tr -d '\r')
expect_match "$head" '^HTTP/1.1 200' "changed after POST"
expect_eq "$(sed -n 's/^x-ratelimit-remaining: //p' <<<"$head")" "$((remaining - 1))" "a 200 spends one"

# Limited: a burst of 2, then 429 with Retry-After.
for _ in 1 2; do
    expect_eq "$(c -o /dev/null -w '%{http_code}' "$url/limited/smoke?rate=0.1&burst=2")" 200 "within the burst"
done
head=$(c -D - -o /dev/null "$url/limited/smoke?rate=0.1&burst=2" | tr -d '\r')
expect_match "$head" '^HTTP/1.1 429' "bucket empty"
expect_match "$head" $'\nretry-after: (9|10)\n' "Retry-After rounded up"

echo "smoke: ok"
