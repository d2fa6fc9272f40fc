# sluice — the two commands of the quick start are `make run` and `make test`.
GO ?= go
BENCHTIME ?= 1s

.PHONY: bench-peers bench-delivery-deployed bench-sensors run test test-short test-peers test-kafka vet fmt-check bench bench-engine bench-async bench-kafka bench-storm bench-delivery bench-priority bench-redis

# The main job on embedded defaults: the drone delivery scheduler with an
# in-process broker, simulated backends and load: 30 s of load, then the
# drain (until every request is accounted for, or 30 s without progress)
# and a verdict of a few lines. 34 s in all in one run on a 2-core machine,
# 47 s with the machine shared with other jobs (docs/quick-start.md).
run:
	$(GO) run ./pipelines/cmd/sluice demo -duration 30s

# vet, formatting, and every test with the race detector, in four phases,
# each announced with what it does and its expected time: [1/4] setup
# installs the programs that tests run (redis-server, kcat, chromium) if
# they are missing (internal/testenv/setup.sh: apt-get as root or through
# sudo -n; otherwise it stops with the command to run; SLUICE_SETUP=skip
# installs nothing), [2/4] the modules, [3/4] go vet and gofmt, [4/4] the
# tests, each package's result printed as it finishes with a running
# count; then the total time (internal/testenv/maketest.sh).
test:
	@GO=$(GO) bash internal/testenv/maketest.sh full

# The same phases with go test -short: the tests that take seconds of real
# time skip themselves (processes, outages waited out, headless chromium);
# the rest, unit tests and quick integration tests against kfake and
# redis-server, run with the race detector. A quick signal before make test.
test-short:
	@GO=$(GO) bash internal/testenv/maketest.sh short

# The integration suite against a real Apache Kafka 4.1 broker (KRaft, one
# node, loopback), started from its Maven Central jars. Installs what it
# needs first, as test does: java 17+ and mvn, redis-server and kcat. Then
# compiles the Java peer of bench-peers (mvn), so that it does not rot.
test-kafka:
	@bash internal/testenv/setup.sh kafka
	SLUICE_KAFKA_LIBS="$$(bash internal/testenv/kafka/fetch-jars.sh)" \
		$(GO) test -tags kafka -count=1 -run RealKafka ./source/kafka/ ./source/ownership/ ./sink/kafka/ ./pipelines/demo/ ./pipelines/cmd/sluice/ ./pipelines/sensors/
	bash benchmarks/peers/parallel-consumer/build.sh >/dev/null

vet:
	$(GO) vet ./...

# The Watermill peers of bench-peers and bench-redis, modules of their own,
# vetted and built so that they do not rot (downloads Sarama,
# OpenTelemetry and watermill-redisstream the first time; about a minute
# then, seconds after). Not part of make test; CI runs it.
test-peers:
	cd benchmarks/peers/watermill && $(GO) vet ./... && $(GO) build -o /dev/null .
	cd benchmarks/peers/watermill-redis && $(GO) vet ./... && $(GO) build -o /dev/null .

fmt-check:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# Every benchmark, baselines included (docs/benchmarks.md has the tables).
bench:
	cd benchmarks && $(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) .

# The engine comparison of docs/benchmarks.md.
bench-engine:
	cd benchmarks && $(GO) test -run '^$$' -bench BenchmarkPipeline -benchtime $(BENCHTIME) .

# The asynchronous-stage and adaptive-limiter benchmarks of docs/benchmarks.md.
bench-async:
	cd benchmarks && $(GO) test -run '^$$' -bench 'BenchmarkMapAsync|BenchmarkAdaptive' -benchtime 1x .

# The Kafka pipeline benchmark against kfake (1,000,000 records, 16 partitions).
bench-kafka:
	cd benchmarks && $(GO) test -run '^$$' -bench BenchmarkKafkaPipeline -benchtime 5x .

# Redis Streams on a real redis-server (needs redis-server installed):
# reading 1,000,000 entries of 200 bytes in a consumer group by hand, with
# sluice and with Watermill (a peer module built from
# benchmarks/peers/watermill-redis, whose modules come from the Go proxy
# the first time), and writing them by hand and with sluice's sink (about
# 2 minutes, most of it Watermill's; SLUICE_REDIS_ENTRIES=100000 for a
# shorter run).
bench-redis:
	cd benchmarks && $(GO) test -run '^$$' -bench BenchmarkRedisStreams -benchtime 1x .

# The retry storm: a service down for 5 s under 200 clients (about 40 s).
bench-storm:
	cd benchmarks && $(GO) test -run '^$$' -bench BenchmarkRetryStorm -benchtime 1x .

# Priorities under overload: a 64-worker service offered 1.5x its capacity
# for 20 s, fifo against strict, weighted and aging (about 3 minutes;
# SLUICE_PRIORITY_DURATION=5s for a shorter run).
bench-priority:
	cd benchmarks && $(GO) test -run '^$$' -bench 'BenchmarkPriority$$' -benchtime 1x .

# The delivery scheduler at fixed rates and one burst (about a minute).
bench-delivery:
	cd benchmarks && $(GO) test -run '^$$' -bench BenchmarkDeliveryPipeline -benchtime 1x .

# The sensors workload: flow.Tumbling alone against go-streams' window and
# a hand loop (1.2 M readings), then the whole worker on kfake and a real
# redis-server (needs redis-server installed) draining a 12-minute backlog
# with 1 and 3 instances (about 2 minutes).
bench-sensors:
	cd benchmarks && $(GO) test -run '^$$' -bench 'BenchmarkSensors|BenchmarkTumbling' -benchtime 1x .

# The delivery system deployed: every part a process of its own, a real
# redis-server (needs redis-server installed), steady rates, a burst, kills,
# a Redis outage, and services answering 500, slow, or down (about 22
# minutes; one scenario alone: make bench-delivery-deployed
# SCENARIO=services_down). SCENARIO=compare runs a scheduler written by
# hand without sluice (benchmarks/handwritten/scheduler) and sluice's,
# each pair in both orders, on the same processes at 500, 1,000 and 3,000
# requests/s and draining a backlog (about 8 minutes; SLUICE_DEPLOYED_LOAD=5s
# shortens each load).
SCENARIO ?=
bench-delivery-deployed:
	cd benchmarks && $(GO) test -run '^$$' -bench 'BenchmarkDeliveryDeployed$(if $(SCENARIO),/$(SCENARIO)$$)' -benchtime 1x -timeout 30m .

# sluice against its peers: parallel-consumer, Watermill and a
# hand-written franz-go consumer (go-streams' Kafka connector has no
# module the proxy serves), each a process of its own, on one real Apache
# Kafka 4.1 broker (500,000 records, 16 partitions, 256 calls of 2 ms in
# flight, unordered and per key); one markdown table. Installs what it
# needs first, as test-kafka does; builds each peer (go build, or the Java
# peer's build.sh with mvn). Minutes: not part of make test, whose go vet
# and runner test build the Go peers of the main module (make test-peers
# the Watermill one). Fails if a row does not pass its check. PEERS_FLAGS
# passes flags, e.g.
# PEERS_FLAGS='-impl sluice,franzgo -out peers.md -cpuprofile /tmp/sluice'.
PEERS_FLAGS ?=
bench-peers:
	@bash internal/testenv/setup.sh kafka
	SLUICE_KAFKA_LIBS="$$(bash internal/testenv/kafka/fetch-jars.sh)" \
		$(GO) run ./benchmarks/peers/runner $(PEERS_FLAGS)
