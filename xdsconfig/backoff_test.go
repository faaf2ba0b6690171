package xdsconfig

import (
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	for _, tt := range []struct {
		name string
		b    Backoff
		rand float64
		want []time.Duration
	}{
		{name: "doubles up to the maximum", b: Backoff{Initial: time.Second, Max: 5 * time.Second},
			want: []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}},
		{name: "the reference's defaults, jitter at its low end", b: Backoff{Initial: 10 * time.Second, Max: time.Minute, RandomFactor: 0.5, Jitter: true}, rand: 0,
			want: []time.Duration{5 * time.Second, 10 * time.Second, 20 * time.Second, 30 * time.Second, 30 * time.Second}},
		{name: "jitter at its high end, never above the maximum", b: Backoff{Initial: 10 * time.Second, Max: time.Minute, RandomFactor: 0.5, Jitter: true}, rand: 0.999999999,
			want: []time.Duration{15 * time.Second, 30 * time.Second, time.Minute, time.Minute}},
		{name: "a random factor without jitter is not used", b: Backoff{Initial: time.Second, Max: time.Minute, RandomFactor: 0.5}, rand: 0,
			want: []time.Duration{time.Second, 2 * time.Second}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := newBackoff(tt.b)
			b.rand = func() float64 { return tt.rand }
			for i, want := range tt.want {
				if got := b.next().Round(time.Millisecond); got != want {
					t.Errorf("wait %d = %s, want %s", i, got, want)
				}
			}
			b.reset()
			if got, want := b.next().Round(time.Millisecond), tt.want[0]; got != want {
				t.Errorf("after reset, wait = %s, want %s", got, want)
			}
		})
	}
}

func TestBackoffValidate(t *testing.T) {
	for _, tt := range []struct {
		b    Backoff
		want string
	}{
		{Backoff{Initial: time.Second, Max: time.Second, RandomFactor: 1}, ""},
		{Backoff{Max: time.Second}, "backoff: the initial interval must be positive"},
		{Backoff{Initial: 2 * time.Second, Max: time.Second}, "backoff: the maximum interval must be at least the initial one"},
		{Backoff{Initial: time.Second, Max: time.Second, RandomFactor: 1.5}, "backoff: the random factor must be between 0 and 1"},
	} {
		got := ""
		if err := tt.b.validate(); err != nil {
			got = err.Error()
		}
		if got != tt.want {
			t.Errorf("%+v: validate = %q, want %q", tt.b, got, tt.want)
		}
	}
}
