package delivery

import (
	"context"
	"math/rand/v2"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"
)

// Ids and owners of any bytes (control bytes, '#', '?', '%', '/', '..',
// invalid UTF-8), escaped as the callers escape them, under bases with a
// path prefix, a trailing slash, an escaped path, user info, an IPv6 host
// with a zone, or no host: the request's URL and Host are those of
// parsing the concatenation, and the id stays one path segment below its
// route.
func TestHTTPRequestURLAsParsedForAnyID(t *testing.T) {
	bases := []string{"http://127.0.0.1:8080", "http://h/api/", "http://h/api", "https://us%20er:p%40ss@h:443/v1",
		"http://[fe80::1%25en0]:8080/x", "http://[::1]/", "http://h/a%2Fb", "http://h/a%2fb/", "http://h/%7Eme",
		"http:/no-host", "http:///triple", "http://h:/", "http://h/x;y", "http://h/x%3F/"}
	rnd := rand.New(rand.NewPCG(1, 2))
	alphabet := []byte("ab/.%?#;,:@&=+$ \t\r\n\x00\x7f\xff\xc3\xa9[]~*'()!\\")
	randID := func() string {
		var b strings.Builder
		for range rnd.IntN(8) + 1 {
			b.WriteByte(alphabet[rnd.IntN(len(alphabet))])
		}
		return b.String()
	}
	for _, base := range bases {
		c := &httpClient{base: base, baseURL: parseBase(base)}
		if c.baseURL == nil {
			t.Logf("%s is parsed anew for every call", base)
		}
		for range 3000 {
			id, owner := randID(), randID()
			for _, route := range []string{"/drones/", "/packages/", "/deliveries/"} {
				path := route + url.PathEscape(id)
				check(t, c, base, path)
				got, err := c.newRequest(context.Background(), http.MethodPut, path, nil)
				if err != nil {
					t.Fatalf("%s + %s: %v", base, path, err)
				}
				if !strings.HasSuffix(got.URL.EscapedPath(), path) {
					t.Fatalf("%s + %s: the request's path %q does not end in the route and the escaped id", base, path, got.URL.EscapedPath())
				}
			}
			check(t, c, base, "/accounts/"+url.PathEscape(owner)+"/check?delivery="+url.QueryEscape(id))
		}
	}
}

func check(t *testing.T, c *httpClient, base, path string) {
	t.Helper()
	want, wantErr := http.NewRequestWithContext(context.Background(), http.MethodPut, base+path, nil)
	got, err := c.newRequest(context.Background(), http.MethodPut, path, nil)
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("%s + %q: error %v, want %v", base, path, err, wantErr)
	}
	if err != nil {
		return
	}
	if !reflect.DeepEqual(got.URL, want.URL) || got.Host != want.Host || got.URL.String() != want.URL.String() ||
		got.URL.RequestURI() != want.URL.RequestURI() {
		t.Fatalf("%s + %q: URL %#v host %q, want %#v host %q", base, path, got.URL, got.Host, want.URL, want.Host)
	}
}
