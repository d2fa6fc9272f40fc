package main

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/internal/testenv"
)

// connect is what the worker does with -redis and -redis-ca before it joins
// its group.
func connect(t *testing.T, url, ca string) error {
	t.Helper()
	opts, err := redisOptions(url, ca)
	if err != nil {
		return err
	}
	rc := redis.NewClient(opts)
	defer rc.Close()
	return checkRedis(context.Background(), rc, opts)
}

// -redis takes a URL with a user, a password, a database and TLS, against
// real redis-servers that want them; a wrong or missing password is named
// as an authentication failure, and no message shows the password.
func TestRedisURLs(t *testing.T) {
	pw := testenv.StartRedisWith(t, testenv.RedisAuth{Password: "s3cret"})
	if err := connect(t, "redis://:s3cret@"+pw.Addr+"/2", ""); err != nil {
		t.Fatalf("password in the URL, db 2: %v", err)
	}
	err := connect(t, "redis://:wrong@"+pw.Addr, "")
	if err == nil || !strings.Contains(err.Error(), "authentication failed: the user or password is wrong") || strings.Contains(err.Error(), "wrong@") {
		t.Fatalf("wrong password: %v", err)
	}
	err = connect(t, pw.Addr, "")
	if err == nil || !strings.Contains(err.Error(), "wants a password and none was given") {
		t.Fatalf("no password: %v", err)
	}
	t.Setenv("SLUICE_REDIS_PASSWORD", "s3cret")
	if err := connect(t, pw.Addr, ""); err != nil {
		t.Fatalf("host:port with $SLUICE_REDIS_PASSWORD: %v", err)
	}
	if err := connect(t, "redis://"+pw.Addr+"/1", ""); err != nil {
		t.Fatalf("URL without a password, with $SLUICE_REDIS_PASSWORD: %v", err)
	}

	acl := testenv.StartRedisWith(t, testenv.RedisAuth{User: "sched", Password: "p4ss", TLS: true})
	t.Setenv("SLUICE_REDIS_PASSWORD", "p4ss")
	if err := connect(t, "rediss://sched@"+acl.Addr+"/3", acl.CAFile); err != nil {
		t.Fatalf("ACL user over TLS with the CA: %v", err)
	}
	err = connect(t, "rediss://sched@"+acl.Addr, "")
	if err == nil || !strings.Contains(err.Error(), "certificate is not trusted") || !strings.Contains(err.Error(), "(TLS) at "+acl.Addr+" as sched") {
		t.Fatalf("TLS without the CA: %v", err)
	}
	err = connect(t, "rediss://other:p4ss@"+acl.Addr, acl.CAFile)
	if err == nil || !strings.Contains(err.Error(), "authentication failed") || strings.Contains(err.Error(), "p4ss") {
		t.Fatalf("unknown ACL user: %v", err)
	}

	for _, c := range []struct{ url, ca, want string }{
		{"redis://:pw@host:port:x", "", "xxxxx"},
		{"127.0.0.1", "", "want host:port or a redis:// URL"},
		{"redis://127.0.0.1:1", "ca.pem", "not a rediss:// URL"},
		{"rediss://127.0.0.1:1", "/nonexistent/ca.pem", "-redis-ca"},
	} {
		_, err := redisOptions(c.url, c.ca)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), ":pw@") {
			t.Errorf("-redis %q -redis-ca %q: %v, want an error with %q and no password", c.url, c.ca, err, c.want)
		}
	}
}
