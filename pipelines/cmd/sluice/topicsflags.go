package main

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/internal/logx"
)

// topicsFlags are -transport, -redis and -redis-ca of the commands that
// write or read the topics themselves (loadgen, verify, deadletters): on
// Kafka the topics of -brokers, on Redis the streams of the same names on
// the server of -redis.
type topicsFlags struct {
	transport         *choiceFlag
	redisURL, redisCA string
	ropts             *redis.Options
}

func (f *topicsFlags) register(fs *flag.FlagSet) {
	f.transport = transportVar(fs)
	fs.StringVar(&f.redisURL, "redis", "", "with -transport redis, the server of the streams: redis://[user:password@]host:port[/db], "+
		"rediss:// for TLS, or host:port; the password may come from $SLUICE_REDIS_PASSWORD instead")
	fs.StringVar(&f.redisCA, "redis-ca", "", "PEM file of the CA that a rediss:// server's certificate chains to (default: the system's)")
}

// onRedis reports whether the topics are Redis streams.
func (f *topicsFlags) onRedis() bool { return f.transport.value == transportRedis }

// parse checks the flags together once they are parsed: -transport redis
// needs -redis, and -redis alone would be ignored (the topics on Kafka
// while the user meant Redis).
func (f *topicsFlags) parse() error {
	switch {
	case f.onRedis() && f.redisURL == "":
		return errors.New("-transport redis: -redis must name the server of the streams (redis://host:port, rediss:// for TLS)")
	case !f.onRedis() && f.redisURL != "":
		return errors.New("-redis is set, but -transport is kafka: add -transport redis to use the streams on that server")
	case !f.onRedis() && f.redisCA != "":
		return errors.New("-redis-ca is set, but -transport is kafka: it is for -transport redis")
	case !f.onRedis():
		return nil
	}
	var err error
	f.ropts, err = redisOptions(f.redisURL, f.redisCA)
	return err
}

// connect returns a client of -redis once the server answers (an error
// naming it and what is wrong, authentication or certificate, if not).
func (f *topicsFlags) connect(ctx context.Context) (*redis.Client, error) {
	// go-redis's own lines (a dial failing, again and again in an
	// outage) go through the process's logger, a few at a time, as the
	// workers' do.
	redis.SetLogger(logx.NewPrintf(slog.Default(), "go-redis"))
	rc := redis.NewClient(f.ropts)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := rc.Ping(cctx).Err(); err != nil {
		rc.Close()
		return nil, explainRedis(err, f.ropts)
	}
	return rc, nil
}

// where names the topics' home, for messages: the Kafka brokers, or the
// Redis server without its secret.
func (f *topicsFlags) where(brokers []string) string {
	if f.onRedis() {
		return describeRedis(f.ropts)
	}
	return strings.Join(brokers, ",")
}
