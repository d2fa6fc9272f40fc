#!/usr/bin/env bash
# Installs the programs that a make target's tests run, when they are
# missing. Usage: setup.sh PROFILE
#
#   test   (make test)        redis-server, kcat, chromium
#   kafka  (make test-kafka)  java 17+, mvn, redis-server, kcat
#
# With everything there it prints nothing and calls nothing but bash's
# own `command -v`. Otherwise, on Debian/Ubuntu, it installs the missing
# packages with apt-get, without their recommended packages (chromium's
# would bring a hundred more and upgrade systemd): directly as root,
# through `sudo -n` when sudo works without a password; else it stops at
# once, naming what is missing and the one command that installs it.
# SLUICE_SETUP=skip only reports what is missing and exits 0 (the tests
# that need it will then fail). When another apt-get or dpkg holds the
# package system's locks (an unattended upgrade, another install), it
# waits up to 5 minutes, saying what holds them.
#
# Every outside program (id, apt-get, apt-cache, sudo, java, sleep) is
# found through PATH, so that a test can put stubs in their place.
set -euo pipefail

usage() {
	echo "usage: $0 test|kafka" >&2
	exit 2
}
[ $# -eq 1 ] || usage
profile=$1
case "$profile" in
test) tools=(redis-server kcat chromium) ;;
kafka) tools=(java mvn redis-server kcat) ;;
*) usage ;;
esac
target="make test"
[ "$profile" = kafka ] && target="make test-kafka"

say() { echo "setup ($target): $*" >&2; }

# java's major version (8 for "1.8.0_292", 17 for "17.0.15"), or nothing.
java_major() {
	local out
	out=$(java -version 2>&1) || return 0
	if [[ $out =~ version\ \"([0-9]+)(\.([0-9]+))? ]]; then
		if [ "${BASH_REMATCH[1]}" = 1 ]; then
			echo "${BASH_REMATCH[3]}"
		else
			echo "${BASH_REMATCH[1]}"
		fi
	fi
}

# has TOOL: the command is there (java: and is 17 or later, which Kafka
# 4.1 needs).
has() {
	command -v "$1" >/dev/null 2>&1 || return 1
	if [ "$1" = java ]; then
		local major
		major=$(java_major)
		[ -n "$major" ] && [ "$major" -ge 17 ]
	fi
}

# Sets need to the tools that are missing. (No mapfile and no empty
# array expansions: this runs under macOS's bash 3.2 too.)
find_missing() {
	local t
	need=()
	for t in "${tools[@]}"; do
		has "$t" || need+=("$t")
	done
}

# The Debian package of a Java runtime 17 or later that apt knows of
# (openjdk-17 on Debian 12 and Ubuntu 22.04/24.04, openjdk-21 where 17 is
# gone); openjdk-17-jre-headless when apt cannot tell (no package lists
# yet).
java_package() {
	local p candidate
	if command -v apt-cache >/dev/null 2>&1; then
		for p in openjdk-17-jre-headless openjdk-21-jre-headless; do
			candidate=$(LC_ALL=C apt-cache policy "$p" 2>/dev/null) || continue
			if [[ $candidate =~ Candidate:\ ([^[:space:]]+) ]] && [ "${BASH_REMATCH[1]}" != "(none)" ]; then
				echo "$p"
				return
			fi
		done
	fi
	echo openjdk-17-jre-headless
}

# Sets pkgs to the Debian packages of the tools in need.
find_packages() {
	local t
	pkgs=()
	for t in "${need[@]}"; do
		case "$t" in
		java) pkgs+=("$(java_package)") ;;
		mvn) pkgs+=(maven) ;;
		*) pkgs+=("$t") ;; # redis-server, kcat, chromium: the package has the command's name
		esac
	done
}

find_missing
[ ${#need[@]} -eq 0 ] && exit 0

# The one command to give a person: apt-get's, through sudo unless root.
install_hint() {
	local sudo="sudo "
	[ "$(id -u 2>/dev/null || echo)" = 0 ] && sudo=""
	if command -v apt-get >/dev/null 2>&1; then
		echo "${sudo}apt-get install -y --no-install-recommends $*"
	else
		echo "install with your package manager (on Debian/Ubuntu: ${sudo}apt-get install -y --no-install-recommends $*)"
	fi
}

if [ "${SLUICE_SETUP:-}" = skip ]; then
	find_packages
	say "missing ${need[*]}; not installing (SLUICE_SETUP=skip); to install: $(install_hint "${pkgs[@]}")"
	exit 0
fi

stop() {
	find_packages
	say "missing ${need[*]}$1. Run:"
	echo "    $(install_hint "${pkgs[@]}")" >&2
	echo "and then $target again (or SLUICE_SETUP=skip $target to run without them)." >&2
	exit 1
}

command -v apt-get >/dev/null 2>&1 || stop " and no apt-get here to install it"

# Root runs apt-get itself; anyone else through sudo, if it needs no
# password.
as=()
if [ "$(id -u 2>/dev/null || echo)" = 0 ]; then
	export DEBIAN_FRONTEND=noninteractive
elif command -v sudo >/dev/null 2>&1 && sudo -n true >/dev/null 2>&1; then
	as=(sudo -n DEBIAN_FRONTEND=noninteractive)
else
	stop " (not root, and sudo needs a password or is not there)"
fi

# How long to wait for the package system's locks, in seconds. apt-get
# waits for the dpkg lock itself (DPkg::Lock::Timeout), saying every
# second which process holds it; apt-get update does not wait for the
# package lists' lock (apt 2.6), so update_lists tries again.
lock_wait=300
apt_get() { ${as[0]+"${as[@]}"} apt-get -o DPkg::Lock::Timeout=$lock_wait "$@"; }

# update_lists runs apt-get update; while another apt-get holds the lists'
# lock, it says so and tries again every 5 s, for lock_wait seconds.
update_lists() {
	local out waited=0
	while :; do
		if out=$(apt_get update -q 2>&1); then
			[ -z "$out" ] || echo "$out" >&2
			return 0
		fi
		if [[ $out =~ (Could not get lock [^$'\n']*) ]] && [ $waited -lt $lock_wait ]; then
			say "${BASH_REMATCH[1]}; waiting (${waited} s of ${lock_wait} s)"
			sleep 5
			waited=$((waited + 5))
			continue
		fi
		echo "$out" >&2
		return 1
	done
}

update_lists || say "apt-get update failed; installing from the package lists there are"
find_packages # after the update: apt-cache knows the candidates
say "installing ${pkgs[*]} for ${need[*]}"
if ! apt_get install -y -q --no-install-recommends "${pkgs[@]}" >&2; then
	stop " and apt-get install ${pkgs[*]} failed"
fi

hash -r
installed=("${pkgs[@]}")
find_missing
if [ ${#need[@]} -gt 0 ]; then
	say "still missing after apt-get install ${installed[*]}: ${need[*]}"
	if [[ " ${need[*]} " == *" java "* ]] && command -v java >/dev/null 2>&1; then
		say "the java on PATH is version $(java_major), older than 17: choose a 17+ one with update-alternatives --config java"
	fi
	exit 1
fi
say "installed ${installed[*]}"
