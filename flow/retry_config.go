package flow

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"
)

// RetryPolicies are retry policies by name, loaded once at start from one
// file and the environment.
type RetryPolicies map[string]RetryPolicy

// EnvPrefix starts the environment variables that override policy fields:
// SLUICE_RETRY_<POLICY>_<FIELD>, for example SLUICE_RETRY_BACKGROUND_MAX_ATTEMPTS=5
// or SLUICE_RETRY_INTERACTIVE_BASE_DELAY=20ms (policy names upper-cased,
// '-' as '_'). When policy names share a prefix ("drone" and
// "drone-scheduler"), a variable belongs to the longest name it starts
// with whose rest is a field.
const EnvPrefix = "SLUICE_RETRY_"

// DefaultRetryPolicies returns "background" and "interactive".
func DefaultRetryPolicies() RetryPolicies {
	return RetryPolicies{"background": Background(), "interactive": Interactive()}
}

// LoadRetryPolicies reads policies from a JSON file (path "" reads none),
// then applies overrides from environ (os.Environ() form: "KEY=value"), and
// validates the result. A policy named in the file starts from the
// defaults of "interactive" if so named, of "background" otherwise, so a
// file only states what it changes:
//
//	{"policies": {"backend-calls": {"max_attempts": 5, "base_delay": "200ms"}}}
//
// Unknown fields, malformed values, unknown variables under EnvPrefix and
// invalid policies are errors naming the policy and the field.
func LoadRetryPolicies(path string, environ []string) (RetryPolicies, error) {
	return LoadRetryPoliciesFrom(DefaultRetryPolicies(), path, environ)
}

// LoadRetryPoliciesFrom is LoadRetryPolicies starting from base, the
// policies a program defines (DefaultRetryPolicies and its own) in place
// of DefaultRetryPolicies: a file's policy of a name in base starts from
// it, and SLUICE_RETRY_<NAME>_<FIELD> changes its fields. base is not
// changed.
func LoadRetryPoliciesFrom(base RetryPolicies, path string, environ []string) (RetryPolicies, error) {
	ps := make(RetryPolicies, len(base))
	for n, p := range base {
		ps[n] = p
	}
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("sluice: retry policies: %w", err)
		}
		var file struct {
			Policies map[string]json.RawMessage `json:"policies"`
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&file); err != nil {
			return nil, fmt.Errorf("sluice: retry policies %s: %w", path, err)
		}
		for name, raw := range file.Policies {
			p, ok := ps[name]
			if !ok {
				p = Background()
			}
			if err := p.decode(raw, true); err != nil {
				return nil, fmt.Errorf("sluice: retry policies %s: policy %q: %w", path, name, err)
			}
			ps[name] = p
		}
	}
	if err := ps.applyEnv(environ); err != nil {
		return nil, err
	}
	var errs []error
	names := make([]string, 0, len(ps))
	for n := range ps {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := ps[n].Validate(); err != nil {
			errs = append(errs, fmt.Errorf("policy %q: %w", n, err))
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("sluice: retry policies: %w", errors.Join(errs...))
	}
	return ps, nil
}

// Get returns the named policy or an error naming the known ones.
func (ps RetryPolicies) Get(name string) (RetryPolicy, error) {
	if p, ok := ps[name]; ok {
		return p, nil
	}
	known := make([]string, 0, len(ps))
	for n := range ps {
		known = append(known, n)
	}
	sort.Strings(known)
	return RetryPolicy{}, fmt.Errorf("sluice: retry policy %q is not defined (known: %s)", name, strings.Join(known, ", "))
}

func envName(s string) string { return strings.ToUpper(strings.ReplaceAll(s, "-", "_")) }

func (ps RetryPolicies) applyEnv(environ []string) error {
	var errs []error
	for _, kv := range environ {
		key, val, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(key, EnvPrefix) {
			continue
		}
		name, field, err := ps.envTarget(strings.TrimPrefix(key, EnvPrefix))
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", key, err))
			continue
		}
		p := ps[name]
		if err := setField(&p, field, val); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", key, err))
			continue
		}
		ps[name] = p
	}
	if len(errs) > 0 {
		return fmt.Errorf("sluice: retry policies from the environment: %w", errors.Join(errs...))
	}
	return nil
}

// envTarget finds the policy a variable (without EnvPrefix) is about and
// the field it sets. Names may share a prefix ("drone" and
// "drone-scheduler", "drone" and "drone-max"): of the policies whose name
// the variable starts with, the longest one whose rest of the variable is
// a field wins, so the answer never depends on map order and a variable
// that only one policy makes sense of goes to that one. Two policies with
// the same variable name ("a-b" and "a_b") cannot be told apart: an error
// names both.
func (ps RetryPolicies) envTarget(rest string) (name, field string, err error) {
	var cands []string
	for n := range ps {
		if strings.HasPrefix(rest, envName(n)+"_") {
			cands = append(cands, n)
		}
	}
	if len(cands) == 0 {
		return "", "", fmt.Errorf("no policy matches (known: %v)", sortedNames(ps))
	}
	// Longest variable name first; equal ones next to each other.
	sort.Slice(cands, func(i, k int) bool {
		a, b := envName(cands[i]), envName(cands[k])
		return len(a) > len(b) || len(a) == len(b) && cands[i] < cands[k]
	})
	for i, n := range cands {
		if i+1 < len(cands) && envName(cands[i+1]) == envName(n) {
			return "", "", fmt.Errorf("policies %q and %q share the variable name %s: rename one", n, cands[i+1], envName(n))
		}
		f := strings.ToLower(strings.TrimPrefix(rest, envName(n)+"_"))
		if isField(f) {
			return n, f, nil
		}
	}
	// No policy has such a field: name the longest one's.
	return cands[0], strings.ToLower(strings.TrimPrefix(rest, envName(cands[0])+"_")), nil
}

// isField reports whether field is the JSON name of a RetryPolicy field.
func isField(field string) bool {
	t := reflect.TypeFor[RetryPolicy]()
	for i := range t.NumField() {
		if strings.Split(t.Field(i).Tag.Get("json"), ",")[0] == field {
			return true
		}
	}
	return false
}

func sortedNames(ps RetryPolicies) []string {
	ns := make([]string, 0, len(ps))
	for n := range ps {
		ns = append(ns, n)
	}
	sort.Strings(ns)
	return ns
}

// setField sets the field whose JSON name is field from its text form.
func setField(p *RetryPolicy, field, val string) error {
	v := reflect.ValueOf(p).Elem()
	t := v.Type()
	for i := range t.NumField() {
		if strings.Split(t.Field(i).Tag.Get("json"), ",")[0] != field {
			continue
		}
		f := v.Field(i)
		switch f.Interface().(type) {
		case time.Duration:
			d, err := parseDuration(val)
			if err != nil {
				return err
			}
			f.SetInt(int64(d))
		case int:
			n, err := strconv.Atoi(val)
			if err != nil {
				return fmt.Errorf("%q is not a whole number", val)
			}
			f.SetInt(int64(n))
		case bool:
			b, err := strconv.ParseBool(val)
			if err != nil {
				return fmt.Errorf("%q is not true or false", val)
			}
			f.SetBool(b)
		case float64:
			x, err := strconv.ParseFloat(val, 64)
			if err != nil {
				return fmt.Errorf("%q is not a number", val)
			}
			f.SetFloat(x)
		case Statuses:
			var st Statuses
			if err := st.UnmarshalText([]byte(val)); err != nil {
				return err
			}
			f.Set(reflect.ValueOf(st))
		default: // Strategy, Jitter
			f.SetString(val)
		}
		return nil
	}
	return fmt.Errorf("unknown field %q", field)
}
