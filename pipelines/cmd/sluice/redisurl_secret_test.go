package main

import (
	"strings"
	"testing"
)

// No error of -redis shows any part of the password, whatever it holds.
func TestRedisErrorsHideThePassword(t *testing.T) {
	for _, c := range []struct{ url, secret string }{
		{"redis://u:hunter2@bad host:6379", "hunter2"},
		{"redis://u:p@ssw0rd@host:x", "ssw0rd"},            // an unescaped @ in the password
		{"redis://u:pa/ssw0rd@host:6379", "pa/ss"},         // an unescaped / ends the authority early (the parser quoted ":pa")
		{"redis://:s3cr3tpw@host:6379/notadb", "s3cr3tpw"}, // a bad db
		{"redis://:s3cr3tpw@host:6379?dial_timeout=x", "s3cr3tpw"},
		{"redis://u:s3cr3t#pw@host:6379", "s3cr3t"},
	} {
		_, err := redisOptions(c.url, "")
		if err != nil && strings.Contains(err.Error(), c.secret) {
			t.Errorf("-redis %q: %v shows %q", c.url, err, c.secret)
		}
		_, err = redisOptions(c.url, "ca.pem")
		if err != nil && strings.Contains(err.Error(), c.secret) {
			t.Errorf("-redis %q -redis-ca: %v shows %q", c.url, err, c.secret)
		}
	}
}
