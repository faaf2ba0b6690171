package refstats

import (
	"fmt"
	"time"

	"github.com/DataDog/datadog-go/v5/statsd"
)

// NewDogStatsdSink returns the sink of DogStatsD (setting USE_DOG_STATSD):
// the Datadog client the reference uses, without client-side aggregation,
// sending to addr (host:port, UDP). Each stat's EXTRA_TAGS become DogStatsD
// tags, and the first of mogrifiers that matches its name rewrites the name
// and adds tags. The client reads Datadog's own variables (DD_ENV,
// DD_SERVICE, DD_VERSION and DD_ENTITY_ID add tags) as the reference's does.
func NewDogStatsdSink(addr string, mogrifiers []Mogrifier) (Sink, error) {
	c, err := statsd.New(addr, statsd.WithoutClientSideAggregation())
	if err != nil {
		return nil, fmt.Errorf("DogStatsD client for %s: %w", addr, err)
	}
	return &dogSink{client: c, mogrifiers: mogrifiers}, nil
}

type dogSink struct {
	client     *statsd.Client
	mogrifiers []Mogrifier
}

// name is a stat's DogStatsD name and tags.
func (d *dogSink) name(stat string) (string, []string) {
	stat, extra := splitTags(stat)
	stat, tags := mogrify(d.mogrifiers, stat)
	return stat, append(extra, tags...)
}

// The client's errors (closed, its buffers full) lose a stat, as the
// reference's sink does.

func (d *dogSink) FlushCounter(stat string, value uint64) {
	name, tags := d.name(stat)
	_ = d.client.Count(name, int64(value), tags, 1)
}

func (d *dogSink) FlushGauge(stat string, value uint64) {
	name, tags := d.name(stat)
	_ = d.client.Gauge(name, float64(value), tags, 1)
}

func (d *dogSink) FlushTimer(stat string, milliseconds float64) {
	name, tags := d.name(stat)
	_ = d.client.Timing(name, time.Duration(milliseconds)*time.Millisecond, tags, 1)
}

func (d *dogSink) Flush() { _ = d.client.Flush() }

func (d *dogSink) close() error { return d.client.Close() }
