package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/pipelines/delivery"
)

// redisOptions reads -redis: a URL (redis://[user:password@]host:port[/db],
// rediss:// for TLS, as go-redis parses it) or a bare host:port. A password
// missing from the URL comes from $SLUICE_REDIS_PASSWORD, so that the secret
// need not be on a command line that every user of the machine can read;
// caFile, if set, is a PEM bundle that a rediss:// server's certificate must
// chain to (default: the system's roots).
func redisOptions(s, caFile string) (*redis.Options, error) {
	var opts *redis.Options
	if strings.Contains(s, "://") {
		var err error
		if opts, err = redis.ParseURL(s); err != nil {
			// The URL parser's message quotes the URL, or the part it
			// stumbled on, which may be the password.
			msg := "not a URL"
			ue := (*url.Error)(nil)
			if !errors.As(err, &ue) {
				msg = err.Error()
			}
			if _, pw := credentials(s); pw != "" {
				msg = strings.ReplaceAll(msg, pw, "xxxxx")
				if errors.As(err, &ue) {
					msg += " (a password with @ / # ? or % in it must be percent-encoded, or given in $SLUICE_REDIS_PASSWORD)"
				}
			}
			return nil, fmt.Errorf("-redis %s: %s (want redis://[user:password@]host:port[/db] or rediss://... for TLS)", redact(s), msg)
		}
	} else {
		if _, _, err := net.SplitHostPort(s); err != nil {
			return nil, fmt.Errorf("-redis %q: %w (want host:port or a redis:// URL)", s, err)
		}
		opts = &redis.Options{Addr: s}
	}
	if opts.Password == "" {
		opts.Password = os.Getenv("SLUICE_REDIS_PASSWORD")
	}
	if caFile != "" {
		if opts.TLSConfig == nil {
			return nil, fmt.Errorf("-redis-ca %s: set, but -redis %s is not a rediss:// URL", caFile, redact(s))
		}
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("-redis-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("-redis-ca %s: no PEM certificate in it", caFile)
		}
		opts.TLSConfig.RootCAs = pool
	}
	if opts.TLSConfig != nil && opts.TLSConfig.MinVersion == 0 {
		opts.TLSConfig.MinVersion = tls.VersionTLS12
	}
	return opts, nil
}

// credentials returns the user and password of a URL as written: what
// stands between "://" and the last "@" (a password may hold an unescaped
// "@", "/" or "#", which a URL parser reads otherwise).
func credentials(s string) (user, password string) {
	_, rest, ok := strings.Cut(s, "://")
	if !ok {
		return "", ""
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return "", ""
	}
	user, password, _ = strings.Cut(rest[:at], ":")
	return user, password
}

// redact drops the password of a URL, for messages and logs: everything
// up to the last "@" but the user.
func redact(s string) string {
	scheme, rest, ok := strings.Cut(s, "://")
	at := strings.LastIndex(rest, "@")
	if !ok || at < 0 {
		return s
	}
	user, _ := credentials(s)
	if strings.ContainsAny(user, "/#?") { // the password's cut is not where a reader would think
		user = "..."
	}
	return scheme + "://" + user + ":xxxxx@" + rest[at+1:]
}

// describeRedis names where opts point, without the secret.
func describeRedis(opts *redis.Options) string {
	where := "redis"
	if opts.TLSConfig != nil {
		where += " (TLS)"
	}
	where += " at " + opts.Addr
	if opts.DB != 0 {
		where += fmt.Sprintf(" db %d", opts.DB)
	}
	if opts.Username != "" {
		where += " as " + opts.Username
	}
	return where
}

// checkRedis is delivery.CheckRedis, with an authentication failure named
// as such: "WRONGPASS invalid username-password pair" or "NOAUTH" says
// what is wrong only to who knows Redis.
func checkRedis(ctx context.Context, rc *redis.Client, opts *redis.Options) error {
	return explainRedis(delivery.CheckRedis(ctx, rc), opts)
}

// openRedis connects to the Redis of url (and ca, a CA file for TLS, or
// ""), checks that it answers, and returns the client and its options;
// the caller closes the client.
func openRedis(ctx context.Context, url, ca string) (*redis.Client, *redis.Options, error) {
	opts, err := redisOptions(url, ca)
	if err != nil {
		return nil, nil, err
	}
	rc := redis.NewClient(opts)
	if err := checkRedis(ctx, rc, opts); err != nil {
		rc.Close()
		return nil, nil, err
	}
	return rc, opts, nil
}

// explainRedis names a failed authentication or an untrusted certificate
// in err, a Redis call's error (nil stays nil).
func explainRedis(err error, opts *redis.Options) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, "WRONGPASS"), strings.Contains(msg, "invalid password"), strings.Contains(msg, "invalid username-password"):
		return fmt.Errorf("%s: authentication failed: the user or password is wrong (the password comes from the URL of -redis or "+
			"$SLUICE_REDIS_PASSWORD): %w", describeRedis(opts), err)
	case strings.Contains(msg, "NOAUTH"):
		return fmt.Errorf("%s: authentication failed: the server wants a password and none was given (put it in the URL of -redis "+
			"or in $SLUICE_REDIS_PASSWORD): %w", describeRedis(opts), err)
	}
	var tlsErr *tls.CertificateVerificationError
	if errors.As(err, &tlsErr) {
		return fmt.Errorf("%s: the server's certificate is not trusted (-redis-ca names the CA to trust): %w", describeRedis(opts), err)
	}
	return fmt.Errorf("%s: %w", describeRedis(opts), err)
}
