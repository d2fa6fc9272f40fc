package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/internal/testenv"
)

// -transport redis needs the server: without -redis the command stops at
// once with a message naming both flags; -redis without -transport redis
// would be ignored, and is refused too.
func TestToolsOnRedisNeedTheServer(t *testing.T) {
	for _, c := range []struct {
		run  func(context.Context, []string) error
		args []string
		want string
	}{
		{runLoadgen, []string{"-transport", "redis"}, "-transport redis: -redis must name"},
		{runVerify, []string{"-transport", "redis", "-record", "x"}, "-transport redis: -redis must name"},
		{runDeadLetters, []string{"-transport", "redis"}, "-transport redis: -redis must name"},
		{runDeadLetters, []string{"replay", "-transport", "redis"}, "-transport redis: -redis must name"},
		{runLoadgen, []string{"-redis", "127.0.0.1:1"}, "-redis is set, but -transport is kafka"},
		{runDeadLetters, []string{"-redis", "127.0.0.1:1"}, "-redis is set, but -transport is kafka"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err := c.run(ctx, c.args)
		late := ctx.Err()
		cancel()
		if err == nil || !strings.Contains(err.Error(), c.want) || late != nil {
			t.Errorf("%v: %v, want %q at once", c.args, err, c.want)
		}
	}
}

// The commands that read or write the topics themselves take -transport,
// list its choices, and take -redis and -redis-ca beside it.
func TestToolsHelpShowsTheTransport(t *testing.T) {
	for _, cmd := range [][]string{{"loadgen"}, {"verify"}, {"deadletters"}, {"deadletters", "replay"}} {
		fs, help := parsedFlags(t, cmd)
		for _, name := range []string{"transport", "redis", "redis-ca"} {
			if fs.Lookup(name) == nil {
				t.Errorf("%v has no -%s", cmd, name)
			}
		}
		for _, w := range []string{`"kafka" (`, `"redis" (`, "-redis string"} {
			if !strings.Contains(help, w) {
				t.Errorf("%v -h does not show %q:\n%s", cmd, w, help)
			}
		}
	}
}

// -redis takes the workers' URL forms: a user and password (or the
// password from $SLUICE_REDIS_PASSWORD), TLS with -redis-ca, a db; a
// wrong password is named as such.
func TestToolsOnRedisWithAuthAndTLS(t *testing.T) {
	srv := testenv.StartRedisWith(t, testenv.RedisAuth{User: "ops", Password: "s3cret", TLS: true})
	ctx := context.Background()
	base := []string{"-transport", "redis", "-redis-ca", srv.CAFile}
	var out bytes.Buffer
	err := listDeadLetters(ctx, append(base, "-redis", "rediss://ops:n0t-it@"+srv.Addr), &out)
	if err == nil || !strings.Contains(err.Error(), "authentication failed") || strings.Contains(err.Error(), "n0t-it") {
		t.Fatalf("a wrong password: %v, want it named as such, without the password", err)
	}
	out.Reset()
	if err := listDeadLetters(ctx, append(base, "-redis", "rediss://ops:s3cret@"+srv.Addr+"/3"), &out); err != nil ||
		!strings.Contains(out.String(), "delivery-dead-letters: 0 dead letters") {
		t.Fatalf("the password in the URL: %v\n%s", err, out.String())
	}
	t.Setenv("SLUICE_REDIS_PASSWORD", "s3cret")
	out.Reset()
	if err := listDeadLetters(ctx, append(base, "-redis", "rediss://ops@"+srv.Addr+"/3"), &out); err != nil {
		t.Fatalf("the password from $SLUICE_REDIS_PASSWORD: %v\n%s", err, out.String())
	}
	if err := listDeadLetters(ctx, []string{"-transport", "redis", "-redis", "rediss://ops@" + srv.Addr}, &out); err == nil ||
		!strings.Contains(err.Error(), "-redis-ca") {
		t.Fatalf("a certificate of an unknown CA: %v, want the fix named (-redis-ca)", err)
	}
}
