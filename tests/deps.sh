#!/bin/sh
# Make sure what the tests need is installed: Criterion (libcriterion-dev),
# valgrind, strace (test_fdtrack counts what forked children read), and for
# the installed-tree test groff (man page lint), man-db (`man`) and
# pkg-config.
# As root we install it with apt-get; otherwise we say exactly what to run.
set -eu
missing=""
[ -f /usr/include/criterion/criterion.h ] || missing="$missing libcriterion-dev"
command -v valgrind >/dev/null 2>&1 || missing="$missing valgrind"
command -v strace >/dev/null 2>&1 || missing="$missing strace"
command -v groff >/dev/null 2>&1 || missing="$missing groff-base"
command -v man >/dev/null 2>&1 || missing="$missing man-db"
command -v pkg-config >/dev/null 2>&1 || missing="$missing pkgconf"
[ -z "$missing" ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
	echo "tests/deps.sh: installing$missing" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >/dev/null
	# shellcheck disable=SC2086
	apt-get install -y -qq $missing >/dev/null
	exit 0
fi
echo "tests/deps.sh: missing$missing; install with:" >&2
echo "    sudo apt-get install -y$missing" >&2
exit 1
