package refstats

import (
	"fmt"
	"log/slog"

	gostats "github.com/lyft/gostats"
)

// NewStatsdSink returns the sink of plain statsd (setting USE_STATSD):
// gostats' own, as the reference's, which writes NAME:VALUE|c, |g and |ms
// lines to host:port over protocol, tcp (gostats' default, and so the
// reference's) or udp. Lines are buffered and sent at every flush, and every
// second by the sink's goroutine; a connection that fails is dialled again
// every 3 s, and what could not be sent meanwhile is dropped (and logged).
// The goroutine lives as long as the process: gostats has no way to stop
// it.
func NewStatsdSink(host string, port int, protocol string, log *slog.Logger) Sink {
	return statsdSink{gostats.NewNetSink(
		gostats.WithStatsdHost(host), gostats.WithStatsdPort(port), gostats.WithStatsdProtocol(protocol),
		gostats.WithLogger(gostatsLog{log}),
	)}
}

type statsdSink struct{ gostats.FlushableSink }

// close has nothing to do: Stats.Close flushed the lines already.
func (statsdSink) close() error { return nil }

// gostatsLog is a gostats.Logger that writes to log.
type gostatsLog struct{ log *slog.Logger }

func (l gostatsLog) Errorf(msg string, args ...any) {
	l.log.Error("statsd: "+fmt.Sprintf(msg, args...), "sink", "statsd")
}

func (l gostatsLog) Warnf(msg string, args ...any) {
	l.log.Warn("statsd: "+fmt.Sprintf(msg, args...), "sink", "statsd")
}
