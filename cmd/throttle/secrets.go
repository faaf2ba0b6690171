package main

import (
	"net/url"
	"strings"
)

// redacted replaces a secret wherever Throttle shows a setting.
const redacted = "xxxxx"

// redactURL returns raw with the password of its user info, and the value
// of every query parameter whose name holds "password" (pgx's password and
// sslpassword), replaced by xxxxx — whether raw parses as a URL or not, as
// an error about a URL that does not parse must not show it either:
// redis://user:xxxxx@host:6379/0.
func redactURL(raw string) string {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return raw
	}
	authority, tail := rest, ""
	if i := strings.IndexAny(rest, "?#"); i >= 0 {
		authority, tail = rest[:i], rest[i:]
	}
	if at := strings.LastIndex(authority, "@"); at >= 0 {
		if user, _, hasPassword := strings.Cut(authority[:at], ":"); hasPassword {
			authority = user + ":" + redacted + authority[at:]
		}
	}
	return scheme + "://" + authority + redactQuery(tail)
}

// redactQuery replaces the values of the password parameters of a URL's
// "?query#fragment" tail.
func redactQuery(tail string) string {
	query, fragment, hasFragment := strings.Cut(tail, "#")
	params := strings.Split(query, "&")
	for i, p := range params {
		if k, _, ok := strings.Cut(p, "="); ok && strings.Contains(strings.ToLower(k), "password") {
			params[i] = k + "=" + redacted
		}
	}
	out := strings.Join(params, "&")
	if hasFragment {
		out += "#" + fragment
	}
	return out
}

// urlSecrets are the passwords in raw (as written, and decoded) that
// redactURL would hide, for scrubbing messages that may quote them.
func urlSecrets(raw string) []string {
	var out []string
	add := func(s string) {
		if s != "" {
			out = append(out, s)
			if d, err := url.PathUnescape(s); err == nil && d != s {
				out = append(out, d)
			}
		}
	}
	_, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return nil
	}
	authority, query := rest, ""
	if i := strings.IndexAny(rest, "?#"); i >= 0 {
		authority, query = rest[:i], rest[i+1:]
	}
	if at := strings.LastIndex(authority, "@"); at >= 0 {
		_, password, _ := strings.Cut(authority[:at], ":")
		add(password)
	}
	query, _, _ = strings.Cut(query, "#")
	for _, p := range strings.Split(query, "&") {
		if k, v, ok := strings.Cut(p, "="); ok && strings.Contains(strings.ToLower(k), "password") {
			add(v)
		}
	}
	return out
}

// scrubbed is an error whose message has the secrets it may quote
// replaced by xxxxx; errors.Is and As still see the error it wraps.
type scrubbed struct {
	err     error
	secrets []string
}

// scrub wraps err so that its message holds none of secrets (nil stays
// nil).
func scrub(err error, secrets []string) error {
	if err == nil || len(secrets) == 0 {
		return err
	}
	return &scrubbed{err: err, secrets: secrets}
}

func (e *scrubbed) Error() string { return scrubString(e.err.Error(), e.secrets) }
func (e *scrubbed) Unwrap() error { return e.err }

func scrubString(s string, secrets []string) string {
	for _, secret := range secrets {
		s = strings.ReplaceAll(s, secret, redacted)
	}
	return s
}
