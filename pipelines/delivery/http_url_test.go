package delivery

import (
	"context"
	"net/http"
	"net/url"
	"reflect"
	"testing"
)

// A call's request has the URL and Host it had when base and path were
// concatenated and parsed for every call, ids that need escaping
// included, whatever the base.
func TestHTTPRequestURLAsParsed(t *testing.T) {
	ids := []string{"d-1", "a/b", "a b", "a;b,c", "ü-ñ", "a%2Fb", "..", ".", "?x", "#f", "a+b", "a:b@c", "$&=", "", "a?b=c#d", "%zz"}
	bases := []string{"http://127.0.0.1:8080", "http://127.0.0.1:8080/", "http://svc.local", "http://h:", "http://[::1]:9000",
		"http://[::1]", "https://user:pw@h/api", "http://h/api%2Fv1", "http://h/a b", "http://h/x?k=v", "http://h/x#frag",
		"http://h/x?", "mailto:ops", "HTTP://H/Up", "http://h/%7Eme", "::bad"}
	for _, base := range bases {
		c := &httpClient{base: base, baseURL: parseBase(base)}
		for _, id := range ids {
			for _, path := range []string{"/drones/" + url.PathEscape(id), "/accounts/" + url.PathEscape(id) + "/check?delivery=" + url.QueryEscape(id),
				"/third-party/check", "/x?", "/y?a=1?b=2"} {
				want, wantErr := http.NewRequestWithContext(context.Background(), http.MethodPut, base+path, nil)
				got, err := c.newRequest(context.Background(), http.MethodPut, path, nil)
				if (err != nil) != (wantErr != nil) {
					t.Fatalf("%s + %s: error %v, want %v", base, path, err, wantErr)
				}
				if err != nil {
					continue
				}
				if !reflect.DeepEqual(got.URL, want.URL) || got.Host != want.Host || got.URL.String() != want.URL.String() {
					t.Errorf("%s + %s: URL %#v host %q, want %#v host %q", base, path, got.URL, got.Host, want.URL, want.Host)
				}
			}
		}
	}
	// The base parsed once is the one of the services' URLs as given.
	if parseBase("http://127.0.0.1:8080") == nil {
		t.Error("a plain base is parsed anew for every call")
	}
}
