#!/usr/bin/env bash
# make test and make test-short, in phases: each announced before it runs
# with what it does and how long it takes, the tests' results printed as
# each package finishes with a running count, and a last line with the
# total time. Usage: maketest.sh full|short (GO names the go command).
#
#   full   every test with the race detector
#   short  go test -short with the race detector: the tests that take
#          seconds of real time (processes, brokers restarted, outages
#          waited out, headless chromium) skip themselves, the others run
set -uo pipefail
cd "$(dirname "$0")/../.."
GO=${GO:-go}

case "${1:-}" in
full) target="make test" ;;
short) target="make test-short" ;;
*)
	echo "usage: $0 full|short" >&2
	exit 2
	;;
esac

start=$SECONDS
finish() {
	local rc=${1:-$?} t=$((SECONDS - start)) verdict=passed
	[ $rc -eq 0 ] || verdict="FAILED (exit $rc)"
	printf '%s: %s in %dm%02ds\n' "$target" "$verdict" $((t / 60)) $((t % 60))
}
trap finish EXIT
set -e

phase() { echo "[$1/4] $2"; }

phase 1 "setup: installs redis-server, kcat and chromium if missing (~1 min the first time; at once after)"
bash internal/testenv/setup.sh test

phase 2 "modules: downloads the dependencies if missing (~30 s the first time; at once after)"
$GO mod download

phase 3 "go vet and gofmt (~1 min the first time; seconds after)"
$GO vet ./...
out=$(gofmt -l .)
if [ -n "$out" ]; then
	echo "gofmt needed:"
	echo "$out"
	exit 1
fi

pkgs=$($GO list ./... | wc -l)
pkgs=${pkgs// /}
if [ "$1" = full ]; then
	phase 4 "unit and integration tests of $pkgs packages, race detector (~7 min on a 2-core machine, up to 18 on a very busy one; the first results after a minute or two of compiling)"
	args=(-race -count=1 ./...)
else
	# The tests that take seconds of real time skip themselves
	# (testing.Short()).
	phase 4 "unit tests and the quick integration tests of $pkgs packages (go test -short), race detector (~1 min on an idle 2-core machine)"
	args=(-short -race -count=1 ./...)
fi
# go test prints a package's result when the package is done, in the
# order of the packages: a long one early holds back the lines of those
# after it. The count says how far the run is; a line every minute with
# none says what is still running, so that a quiet run is seen alive.
done_file=$(mktemp)
echo 0 >"$done_file"
(
	set +e # a line that finds nothing running must not end the loop
	t0=$SECONDS
	while sleep 60; do
		running=$(ps -eo args= 2>/dev/null | grep -o '/[^/ ]*\.test ' | sed 's|^/||; s|\.test $||' | sort -u | tr '\n' ' ')
		t=$((SECONDS - t0))
		printf '  ... %dm%02ds: %s of %s packages reported; testing now: %s\n' $((t / 60)) $((t % 60)) "$(cat "$done_file")" "$pkgs" "${running:-(compiling)}"
	done
) &
beat=$!
trap 'rc=$?; kill $beat 2>/dev/null || true; rm -f "$done_file"; finish $rc' EXIT
$GO test "${args[@]}" 2>&1 | awk -v n="$pkgs" -v f="$done_file" '/^(ok|FAIL|\?)[ \t]/ && $2 ~ /\// { i++; printf "(%d/%d) ", i, n; print i > f; close(f) } { print; fflush() }'
