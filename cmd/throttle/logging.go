package main

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
)

// logSettings are the log's level and format, as the reference service
// names them.
var logSettings = []setting{
	{env: "LOG_LEVEL", flag: "log-level", def: "info", ref: upstreamDefault("WARN"),
		usage: "debug, info, warn or error",
		set:   func(c *config, v string) (err error) { c.LogLevel, err = parseLogLevel(v); return }},
	{env: "LOG_FORMAT", flag: "log-format", def: "json", ref: upstreamDefault("text"),
		usage: "json or text (the reference's default is text)",
		set:   func(c *config, v string) (err error) { c.LogFormat, err = parseLogFormat(v); return }},
}

// parseLogFormat reads json or text, in any case.
func parseLogFormat(v string) (string, error) {
	switch f := strings.ToLower(v); f {
	case "json", "text":
		return f, nil
	}
	return "", fmt.Errorf("%q is not json or text", v)
}

// parseLogLevel reads debug, info, warn or error in any case, and the
// reference service's (logrus's) other names: warning, trace (as debug),
// fatal and panic (as error).
func parseLogLevel(v string) (slog.Level, error) {
	switch strings.ToLower(v) {
	case "trace":
		return slog.LevelDebug, nil
	case "warning":
		return slog.LevelWarn, nil
	case "fatal", "panic":
		return slog.LevelError, nil
	}
	var l slog.Level
	if err := l.UnmarshalText([]byte(v)); err != nil {
		return 0, fmt.Errorf("%q is not one of debug, info, warn, error", v)
	}
	return l, nil
}

// newLogger is serve's log: LOG_FORMAT's handler at LOG_LEVEL, to out.
func newLogger(cfg *config, out io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: cfg.LogLevel}
	if cfg.LogFormat == "text" {
		return slog.New(slog.NewTextHandler(out, opts))
	}
	return slog.New(slog.NewJSONHandler(out, opts))
}
