package flow

import "net/url"

// RedactURL returns the URL s without its user info (the password is what
// url.URL.Redacted hides; here the user name goes too) and without its
// query and fragment, which may hold tokens. It is the form in which
// sluice writes a URL into an error's text, and so into spans, failure
// headers and logs. A string that does not parse is returned as
// "(unparsable URL)".
func RedactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable URL)"
	}
	return redacted(u)
}

// RedactURLError returns err with the URL of a *url.Error (what an
// http.Client's Do returns for a call that failed before an answer) in the
// form of RedactURL; any other error is returned as it is. The copy keeps
// Op, Err and so Unwrap, Timeout and Temporary. MapAsync applies it to
// the error its function returns; a function that wraps the client's error
// in its own text should apply it first.
func RedactURLError(err error) error {
	ue, ok := err.(*url.Error)
	if !ok {
		return err
	}
	c := *ue
	c.URL = RedactURL(ue.URL)
	return &c
}
