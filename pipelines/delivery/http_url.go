package delivery

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// The services' URLs are the base followed by a path whose parts the
// callers escaped (and, for the accounts check, a query). Parsing base and
// path anew for every call (http.NewRequestWithContext with a string) was
// 6 µs and two allocations of a request's five calls: the base is parsed
// once, and each call's URL is the base's with the call's path and query,
// set exactly as parsing their concatenation would set them.

// parseBase parses base for newRequest, or returns nil if appending a path
// to it is not simply appending to its path (it has a query or fragment,
// is opaque, or is not written as url.URL would write it back): such a
// base is concatenated and parsed with every call's path, as it always
// was.
func parseBase(base string) *url.URL {
	u, err := url.Parse(base)
	if err != nil || u.Opaque != "" || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || u.RawFragment != "" ||
		u.String() != base {
		return nil
	}
	return u
}

// newRequest returns the request of a call to path (escaped, with an
// optional query) under the client's base.
func (c *httpClient) newRequest(ctx context.Context, method, path string, body io.Reader) (*http.Request, error) {
	if c.baseURL == nil {
		return http.NewRequestWithContext(ctx, method, c.base+path, body)
	}
	// An empty URL parses without work; its URL is then set in place.
	req, err := http.NewRequestWithContext(ctx, method, "", body)
	if err != nil {
		return nil, err
	}
	if err := joinURL(req.URL, c.baseURL, path); err != nil {
		return nil, err
	}
	req.Host = req.URL.Host
	return req, nil
}

// joinURL sets *u to base followed by path, an escaped path and an
// optional query, as url.Parse sets the URL of their concatenation: Path
// unescaped, RawPath the escaped form where it is not the default
// escaping of Path, and the host without an empty port, as
// http.NewRequest leaves it.
func joinURL(u, base *url.URL, path string) error {
	*u = *base
	p, query, hasQuery := strings.Cut(path, "?")
	p = base.EscapedPath() + p
	unescaped, err := url.PathUnescape(p)
	if err != nil {
		return &url.Error{Op: "parse", URL: base.String() + path, Err: err}
	}
	u.Path, u.RawPath = unescaped, ""
	if (&url.URL{Path: unescaped}).EscapedPath() != p {
		u.RawPath = p
	}
	u.RawQuery, u.ForceQuery = query, hasQuery && query == ""
	u.Host = strings.TrimSuffix(u.Host, ":")
	return nil
}
