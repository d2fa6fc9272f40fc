#!/usr/bin/env bash
# Puts Apache Kafka's broker jars and their runtime dependencies (from Maven
# Central, through the machine's mvn) into a cache folder and prints its
# path. A second run finds them there and downloads nothing.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dest="${SLUICE_KAFKA_LIBS:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice/kafka-4.1.0/libs}"
if [ ! -f "$dest/.complete" ]; then
	mkdir -p "$dest"
	mvn -q -B -f "$here/pom.xml" dependency:copy-dependencies \
		-DoutputDirectory="$dest" -DincludeScope=runtime >&2
	touch "$dest/.complete"
fi
echo "$dest"
