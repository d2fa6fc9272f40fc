package redisstream_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/source/redisstream"
	"github.com/sluice-streams/sluice/stream"
)

// Each bad field is a *stream.ConfigError naming it.
func TestConfigErrorsNameTheField(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	ok := redisstream.Config{Client: c, Streams: []string{"s"}, Group: "g", Consumer: "c"}
	for _, tc := range []struct {
		field string
		edit  func(*redisstream.Config)
	}{
		{"Client", func(c *redisstream.Config) { c.Client = nil }},
		{"Streams", func(c *redisstream.Config) { c.Streams = nil }},
		{"Streams", func(c *redisstream.Config) { c.Streams = []string{"a", ""} }},
		{"Streams", func(c *redisstream.Config) { c.Streams = []string{"a", "a"} }},
		{"Group", func(c *redisstream.Config) { c.Group = "" }},
		{"MinIdle", func(c *redisstream.Config) { c.MinIdle = -time.Second }},
		{"MaxDeliveries", func(c *redisstream.Config) { c.MaxDeliveries = -1 }},
		{"MaxInFlight", func(c *redisstream.Config) { c.MaxInFlight = -1 }},
		{"Block", func(c *redisstream.Config) { c.Block = 5 * time.Second }}, // go-redis' ReadTimeout: 5 s
		{"StartID", func(c *redisstream.Config) { c.StartID = "latest" }},
	} {
		cfg := ok
		tc.edit(&cfg)
		_, err := redisstream.New(context.Background(), cfg)
		var ce *stream.ConfigError
		if !errors.As(err, &ce) || ce.Argument != tc.field || !errors.Is(err, stream.ErrInvalid) || !errors.Is(err, redisstream.ErrConfig) {
			t.Errorf("New with a bad %s = %v, want a *stream.ConfigError naming it", tc.field, err)
		}
	}
}

// New against an address where nothing listens fails within the dial
// timeout with an error naming the address.
func TestNewUnreachable(t *testing.T) {
	ports, err := testenv.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	_, err = redisstream.New(context.Background(), redisstream.Config{Client: c, Streams: []string{"s"}, Group: "g", Consumer: "c"})
	if !errors.Is(err, redisstream.ErrUnreachable) || !strings.Contains(err.Error(), addr) {
		t.Fatalf("New = %v, want ErrUnreachable naming %s", err, addr)
	}
}

// A client whose reads have no time limit (go-redis ReadTimeout -1, or
// -2: no deadlines at all) takes a Block of any length: no read of it
// can time out while it waits.
func TestBlockWithoutReadTimeout(t *testing.T) {
	addr := testenv.Redis(t)
	for _, rt := range []time.Duration{-1, -2} {
		c := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: rt})
		src, err := redisstream.New(context.Background(), redisstream.Config{Client: c, Streams: []string{"s"}, Group: "g", Consumer: "c",
			Create: true, Block: 10 * time.Second})
		if err != nil {
			t.Errorf("New with Block 10s on a client of ReadTimeout %d = %v, want no error", rt, err)
		} else {
			src.Close(context.Background())
		}
		c.Close()
	}
}

// A server that answers with a refusal (a password missing or wrong) is
// reachable: New says what it answered and names the address, instead of
// calling it unreachable, which would send the user looking at the network.
func TestNewRefusedIsNotUnreachable(t *testing.T) {
	r := testenv.StartRedisWith(t, testenv.RedisAuth{Password: "right"})
	for _, tc := range []struct{ password, answer string }{{"", "NOAUTH"}, {"wrong", "WRONGPASS"}} {
		c := redis.NewClient(&redis.Options{Addr: r.Addr, Password: tc.password, MaxRetries: -1})
		_, err := redisstream.New(context.Background(), redisstream.Config{Client: c, Streams: []string{"s"}, Group: "g", Consumer: "c"})
		c.Close()
		if err == nil || errors.Is(err, redisstream.ErrUnreachable) || strings.Contains(err.Error(), "did not answer") ||
			!strings.Contains(err.Error(), tc.answer) || !strings.Contains(err.Error(), r.Addr) || !strings.Contains(err.Error(), "Password") {
			t.Errorf("New with password %q = %v, want the server's %s naming %s and the client's Password, not ErrUnreachable", tc.password, err, tc.answer, r.Addr)
		}
	}
}

// A stream name that is a key of another type (a string, a hash) is
// refused naming the key and what it holds, with Create or without,
// instead of Redis' bare "WRONGTYPE Operation against a key holding the
// wrong kind of value".
func TestNewOnAKeyOfAnotherType(t *testing.T) {
	c := client(t, testenv.Redis(t))
	if err := c.Set(context.Background(), "orders", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	for _, create := range []bool{false, true} {
		_, err := redisstream.New(context.Background(), redisstream.Config{Client: c, Streams: []string{"orders"}, Group: "g", Consumer: "c", Create: create})
		if err == nil || !strings.Contains(err.Error(), `key "orders"`) || !strings.Contains(err.Error(), "holds a string, not a stream") {
			t.Errorf("New (Create %v) on a string key = %v, want it to say the key holds a string, not a stream", create, err)
		}
	}
}

// Without Create, a missing stream or group is an error naming both.
func TestNewWithoutGroup(t *testing.T) {
	c := client(t, testenv.Redis(t))
	produce(t, c, "exists", 0, 1)
	for _, name := range []string{"exists", "missing"} {
		_, err := redisstream.New(context.Background(), redisstream.Config{Client: c, Streams: []string{name}, Group: "nobody", Consumer: "c"})
		if !errors.Is(err, redisstream.ErrNoGroup) || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), "nobody") {
			t.Errorf("New on stream %q = %v, want ErrNoGroup naming the stream and group", name, err)
		}
	}
	// A stream that does not exist at all is said to be missing, not to
	// lack a group: the name may be a typo, or the database another.
	_, err := redisstream.New(context.Background(), redisstream.Config{Client: c, Streams: []string{"missing"}, Group: "nobody", Consumer: "c"})
	if !errors.Is(err, redisstream.ErrNoGroup) || !strings.Contains(err.Error(), `no stream "missing"`) {
		t.Errorf("New on a stream that does not exist = %v, want it to say there is no stream \"missing\"", err)
	}
}

// The group destroyed, or the stream deleted, under a running source: Run
// ends with ErrNoGroup instead of retrying for ever.
func TestGroupOrStreamDeletedWhileRunning(t *testing.T) {
	c := client(t, testenv.Redis(t))
	for _, tc := range []struct {
		what   string
		delete func(name string) error
	}{
		{"group destroyed", func(name string) error { return c.XGroupDestroy(context.Background(), name, "g").Err() }},
		{"stream deleted", func(name string) error { return c.Del(context.Background(), name).Err() }},
	} {
		t.Run(tc.what, func(t *testing.T) {
			name := strings.ReplaceAll(tc.what, " ", "-")
			produce(t, c, name, 0, 5)
			src := newSource(t, redisstream.Config{Client: c, Streams: []string{name}, Group: "g", Consumer: "c", Create: true,
				Block: 50 * time.Millisecond})
			r := run(t, src, true)
			r.await(t, "the entries", count(5))
			if err := tc.delete(name); err != nil {
				t.Fatal(err)
			}
			var err error
			select {
			case err = <-r.done:
				r.done <- err
			case <-time.After(30 * time.Second):
				t.Fatal("Run still going 30 s after the group went")
			}
			if !errors.Is(err, redisstream.ErrNoGroup) || !strings.Contains(err.Error(), name) {
				t.Fatalf("Run = %v, want ErrNoGroup naming the stream", err)
			}
			if src.Ready(t.Context()) == nil {
				t.Error("Ready = nil after the group went")
			}
		})
	}
}

// The client closed under a running source ends Run with redis.ErrClosed
// at once, not after MaxOutage of retries.
func TestClientClosedWhileRunning(t *testing.T) {
	addr := testenv.Redis(t)
	c := redis.NewClient(&redis.Options{Addr: addr})
	produce(t, c, "s", 0, 5)
	src, err := redisstream.New(context.Background(), redisstream.Config{Client: c, Streams: []string{"s"}, Group: "g", Consumer: "c",
		Create: true, Block: 20 * time.Millisecond, MaxOutage: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	r := run(t, src, true)
	r.await(t, "the entries", count(5))
	c.Close()
	select {
	case err = <-r.done:
		r.done <- err
	case <-time.After(30 * time.Second):
		t.Fatal("Run still going 30 s after its client was closed")
	}
	if !errors.Is(err, redis.ErrClosed) {
		t.Fatalf("Run = %v, want redis.ErrClosed", err)
	}
}
