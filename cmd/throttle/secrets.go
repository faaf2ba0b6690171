package main

import (
	"net/url"
	"strings"
)

// redacted replaces a secret wherever Throttle shows a setting.
const redacted = "xxxxx"

// secretKind is how a secret setting's value is hidden.
type secretKind int

const (
	// secretWhole: the value is a key, a password or headers carrying
	// tokens; it is hidden whole.
	secretWhole secretKind = iota + 1
	// secretURL: the value is a URL (or an address) that may carry a
	// password; redactURL hides that and keeps the rest.
	secretURL
)

// secretSettings are the settings whose values are, or may carry, secrets,
// by variable: wherever Throttle shows a setting (/debug/pprof/cmdline,
// the logs, errors) their values are hidden. Any other value that holds a
// URL has its password hidden too (redactArgs). TestSecretSettings checks
// that every setting whose name speaks of a key, a password, headers or a
// URL is here or said not to be secret.
var secretSettings = map[string]secretKind{
	"ADMIN_API_KEY":                             secretWhole,
	"REDIS_AUTH":                                secretWhole,
	"REDIS_SENTINEL_AUTH":                       secretWhole,
	"REDIS_PERSECOND_AUTH":                      secretWhole,
	"REDIS_PERSECOND_SENTINEL_AUTH":             secretWhole,
	"GLOBAL_REDIS_AUTH":                         secretWhole,
	"GLOBAL_REDIS_SENTINEL_AUTH":                secretWhole,
	"OTEL_EXPORTER_OTLP_HEADERS":                secretWhole,
	"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS": secretWhole,
	"REDIS_URL":                                 secretURL,
	"REDIS_PERSECOND_URL":                       secretURL,
	"GLOBAL_REDIS_URL":                          secretURL,
	"DATABASE_URL":                              secretURL,
	"OTEL_EXPORTER_OTLP_ENDPOINT":               secretURL,
	"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT":        secretURL,
	"CONFIG_GRPC_XDS_SERVER_URL":                secretURL,
}

// secretFlags are secretSettings by flag name (serveSettings' rows).
var secretFlags = flagKinds(serveSettings, secretSettings)

func flagKinds(rows []setting, kinds map[string]secretKind) map[string]secretKind {
	out := map[string]secretKind{}
	for _, s := range rows {
		if k, ok := kinds[s.env]; ok {
			out[s.flag] = k
		}
	}
	return out
}

// scrubSetting is err, an error about the value of the setting env, with
// the secrets of that value hidden when the setting is a secret one.
func scrubSetting(env, value string, err error) error {
	switch secretSettings[env] {
	case secretWhole:
		if value == "" {
			return err
		}
		return scrub(err, []string{value})
	case secretURL:
		return scrub(err, urlSecrets(value))
	}
	return err
}

// redactSetting is value, of a setting of kind, as Throttle may show it.
func redactSetting(kind secretKind, value string) string {
	switch kind {
	case secretWhole:
		return redacted
	case secretURL:
		return redactURL(value)
	}
	return value
}

// redactURL returns raw with the password of its user info, and the value
// of every query parameter whose name speaks of a secret (secretParam:
// pgx's password and sslpassword, a collector's api_key or token),
// replaced by xxxxx — whether raw parses as a URL or not, as an error
// about a URL that does not parse must not show it either:
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

// secretParam reports whether a URL's query parameter named name may hold a
// secret: a password, a token, a key, a secret, credentials.
func secretParam(name string) bool {
	name = strings.ToLower(name)
	for _, w := range []string{"password", "passwd", "token", "key", "secret", "auth", "credential", "signature"} {
		if strings.Contains(name, w) {
			return true
		}
	}
	return false
}

// redactQuery replaces the values of the secret parameters of a URL's
// "?query#fragment" tail.
func redactQuery(tail string) string {
	query, fragment, hasFragment := strings.Cut(tail, "#")
	params := strings.Split(query, "&")
	for i, p := range params {
		if k, _, ok := strings.Cut(p, "="); ok && secretParam(k) {
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
		if k, v, ok := strings.Cut(p, "="); ok && secretParam(k) {
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
