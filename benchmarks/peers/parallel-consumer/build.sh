#!/usr/bin/env bash
# Builds the parallel-consumer peer with mvn (its output goes to stderr) and
# prints, on its last stdout line, the java command that runs it; the runner
# appends the protocol flags and execs it (the java process is the consumer).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
mvn -q -B -Dstyle.color=never -f "$here/pom.xml" compile dependency:build-classpath \
	-DskipTests -Dmdep.outputFile="$here/target/classpath.txt" >&2
echo "java -cp $here/target/classes:$(cat "$here/target/classpath.txt") io.github.sluicestreams.peers.Main"
