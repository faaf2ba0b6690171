package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/throttle-rl/throttle/algorithms"
)

// HourLimits are one limit of 10 an hour per algorithm: slow enough that
// nothing refills a whole hit within the Holds suite's minute.
var HourLimits = []algorithms.Limit{
	{Algorithm: algorithms.FixedWindow, Limit: 10, Window: time.Hour},
	{Algorithm: algorithms.SlidingWindow, Limit: 10, Window: time.Hour},
	{Algorithm: algorithms.TokenBucket, Limit: 10, Window: time.Hour},
	{Algorithm: algorithms.GCRA, Limit: 10, Window: time.Hour},
}

// holdSteps runs one store's holds on l, step by step.
type holdSteps struct {
	t     *testing.T
	s     algorithms.Store
	f     Factory
	clock *Clock
	key   algorithms.Key
	l     algorithms.Limit
}

func (h *holdSteps) hold(id string, hits int64, aon bool) algorithms.Decision {
	h.t.Helper()
	r := algorithms.Request{Key: h.key, Limit: h.l, Hits: hits, Hold: &algorithms.Hold{ID: id, TTL: 30 * time.Second}}
	reqs := []algorithms.Request{r}
	if aon {
		// Tied to a request over its limit: the group is void.
		over := algorithms.Request{Key: algorithms.Key{Scope: h.key.Scope, Identifier: "other"}, Limit: h.l, Hits: 11, AllOrNothing: true}
		reqs[0].AllOrNothing = true
		reqs = append(reqs, over)
	}
	ds, err := h.s.Check(context.Background(), reqs)
	if err != nil {
		h.t.Fatalf("hold %s of %d: %v", id, hits, err)
	}
	d := ds[0]
	if held := d.Allowed && d.Counted; held != !d.HoldExpires.IsZero() || (held && !d.HoldExpires.Equal(h.clock.Now().Add(30*time.Second))) {
		h.t.Errorf("hold %s: HoldExpires %v, counted %v, want now + 30 s exactly when counted", id, d.HoldExpires, held)
	}
	return d
}

func (h *holdSteps) settle(id string, hits int64, cancel bool) algorithms.SettleResult {
	h.t.Helper()
	rs, err := h.s.Settle(context.Background(), []algorithms.Settle{{Request: algorithms.Request{Key: h.key, Limit: h.l, Hits: hits}, ID: id, Cancel: cancel}})
	if err != nil {
		h.t.Fatalf("settle %s with %d: %v", id, hits, err)
	}
	return rs[0]
}

func (h *holdSteps) remaining() int64 {
	h.t.Helper()
	if h.f.Sweep != nil {
		h.f.Sweep(h.t, h.s)
	}
	ds, err := h.s.Check(context.Background(), []algorithms.Request{{Key: h.key, Limit: h.l}})
	if err != nil {
		h.t.Fatal(err)
	}
	return ds[0].Remaining
}

// Holds: a hold counts like admitted hits until it is settled (a peek
// shows what is left net of it, and a hold is refused when counted + held
// + hits pass the limit); a commit of less gives the rest back, of more
// counts the excess; a cancel gives all back; a second settle is
// AlreadySettled, one after the expiry Expired (the hold given back, the
// commit counting nothing), an unknown id UnknownHold; a hold in a void
// all-or-nothing group is not kept. Every algorithm, every store.
func Holds(t *testing.T, factories []Factory) {
	for _, f := range factories {
		for _, l := range HourLimits {
			t.Run(fmt.Sprintf("%s/%s", f.Name, l.Algorithm), func(t *testing.T) {
				clock := NewClock(T0)
				s := f.New(t, clock.Now)
				h := &holdSteps{t: t, s: s, f: f, clock: clock, l: l,
					key: algorithms.Key{Scope: UniqueScope(t), Identifier: "user", Name: "llm"}}
				holdSequence(t, h)
			})
		}
	}
}

func holdSequence(t *testing.T, h *holdSteps) {
	if d := h.hold("a", 4, false); !d.Allowed || d.Remaining != 6 {
		t.Fatalf("hold a of 4: %+v, want allowed, 6 left", d)
	}
	if got := h.remaining(); got != 6 {
		t.Errorf("peek with 4 held: %d left, want 6", got)
	}
	if d := h.hold("b", 7, false); d.Allowed || d.Counted {
		t.Errorf("hold b of 7 with 4 held of 10: %+v, want refused", d)
	}
	if r := h.settle("b", 7, false); r.Outcome != algorithms.UnknownHold {
		t.Errorf("settle of the refused hold b: %+v, want unknown", r)
	}
	if r := h.settle("a", 2, false); r.Outcome != algorithms.Settled || r.Held != 4 || r.Decision.Remaining != 8 {
		t.Errorf("commit 2 of a's 4: %+v, want settled, held 4, 8 left", r)
	}
	if r := h.settle("a", 2, false); r.Outcome != algorithms.AlreadySettled {
		t.Errorf("second commit of a: %+v, want already settled", r)
	}
	if r := h.settle("a", 0, true); r.Outcome != algorithms.AlreadySettled {
		t.Errorf("cancel of a settled hold: %+v, want already settled", r)
	}
	if d := h.hold("c", 5, false); !d.Allowed || d.Remaining != 3 {
		t.Fatalf("hold c of 5 with 2 used: %+v, want 3 left", d)
	}
	if r := h.settle("c", 7, false); r.Outcome != algorithms.Settled || r.Held != 5 || r.Decision.Remaining != 1 {
		t.Errorf("commit 7 of c's 5: %+v, want settled, 1 left (2 + 7 used)", r)
	}
	if d := h.hold("d", 1, false); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("hold d of 1: %+v, want 0 left", d)
	}
	if r := h.settle("d", 0, true); r.Outcome != algorithms.Settled || r.Held != 1 || r.Decision.Remaining != 1 {
		t.Errorf("cancel of d: %+v, want settled, 1 left", r)
	}
	if r := h.settle("nobody", 1, false); r.Outcome != algorithms.UnknownHold {
		t.Errorf("settle of an unknown id: %+v, want unknown", r)
	}
	if d := h.hold("g", 1, true); d.Counted {
		t.Errorf("hold g in a void group: %+v, want not counted", d)
	}
	if r := h.settle("g", 1, false); r.Outcome != algorithms.UnknownHold {
		t.Errorf("settle of g, voided: %+v, want unknown", r)
	}
	if d := h.hold("e", 1, false); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("hold e of 1: %+v, want 0 left", d)
	}
	h.clock.Advance(30 * time.Second)
	if got := h.remaining(); got != 1 {
		t.Errorf("peek at e's expiry: %d left, want 1 (e given back)", got)
	}
	if r := h.settle("e", 1, false); r.Outcome != algorithms.Expired {
		t.Errorf("commit of e after its expiry: %+v, want expired", r)
	}
	if got := h.remaining(); got != 1 {
		t.Errorf("after the late commit: %d left, want 1 (it counts nothing)", got)
	}
	if d := h.hold("f", 1, false); !d.Allowed {
		t.Fatalf("hold f: %+v", d)
	}
	h.clock.Advance(31 * time.Second)
	// Settled before any sweep: the settle finds it expired itself.
	if r := h.settle("f", 1, false); r.Outcome != algorithms.Expired {
		t.Errorf("commit of f a second after its expiry: %+v, want expired", r)
	}
	if got := h.remaining(); got != 1 {
		t.Errorf("after f expired: %d left, want 1", got)
	}
}

func (h *holdSteps) held() int64 {
	h.t.Helper()
	got, err := h.s.Held(context.Background(), []algorithms.Request{{Key: h.key, Limit: h.l}})
	if err != nil {
		h.t.Fatalf("held: %v", err)
	}
	return got[0]
}

// Held: what a counter's unexpired, unsettled holds hold — up with each
// hold, down with each commit, cancel and expiry (an expired hold is not
// summed even before a sweep gave it back), and nothing of another
// counter's holds. Every algorithm, every store.
func Held(t *testing.T, factories []Factory) {
	for _, f := range factories {
		for _, l := range HourLimits {
			t.Run(fmt.Sprintf("%s/%s", f.Name, l.Algorithm), func(t *testing.T) {
				clock := NewClock(T0)
				s := f.New(t, clock.Now)
				scope := UniqueScope(t)
				h := &holdSteps{t: t, s: s, f: f, clock: clock, l: l, key: algorithms.Key{Scope: scope, Identifier: "user", Name: "llm"}}
				other := &holdSteps{t: t, s: s, f: f, clock: clock, l: l, key: algorithms.Key{Scope: scope, Identifier: "user", Name: "other"}}
				if got := h.held(); got != 0 {
					t.Errorf("held of a new counter: %d, want 0", got)
				}
				h.hold("a", 3, false)
				h.hold("b", 2, false)
				other.hold("a", 4, false)
				if got := h.held(); got != 5 {
					t.Errorf("held with a of 3 and b of 2: %d, want 5", got)
				}
				if got := other.held(); got != 4 {
					t.Errorf("held of the other counter: %d, want 4", got)
				}
				h.settle("a", 1, false)
				if got := h.held(); got != 2 {
					t.Errorf("held after a's commit: %d, want 2 (b)", got)
				}
				h.settle("b", 0, true)
				if got := h.held(); got != 0 {
					t.Errorf("held after b's cancel: %d, want 0", got)
				}
				h.hold("c", 4, false)
				clock.Advance(10 * time.Second)
				h.hold("d", 1, false)
				if got := h.held(); got != 5 {
					t.Errorf("held with c of 4 and d of 1: %d, want 5", got)
				}
				clock.Advance(20 * time.Second) // c's expiry, no sweep yet
				if got := h.held(); got != 1 {
					t.Errorf("held at c's expiry: %d, want 1 (d)", got)
				}
				if got := h.remaining(); got != 8 {
					t.Errorf("after c's expiry: %d left, want 8 (1 used by a, 1 held by d)", got)
				}
				clock.Advance(10 * time.Second)
				if got := h.held(); got != 0 {
					t.Errorf("held after every expiry: %d, want 0", got)
				}
			})
		}
	}
}

// HoldsCleared: a reset or a clear of a counter takes its holds with it:
// its quota is whole again, a commit of a hold made before finds it
// Cleared and counts nothing (the fresh counter never gets it, and a
// bucket is not brought back), and a hold made after settles as usual. A
// reset of another algorithm leaves the hold alone. Every algorithm, every
// store (Reset where the store indexes its states).
func HoldsCleared(t *testing.T, factories []Factory) {
	for _, f := range factories {
		for _, l := range HourLimits {
			for _, how := range []string{"reset", "clear"} {
				if how == "reset" && f.Unindexed {
					continue
				}
				t.Run(fmt.Sprintf("%s/%s/%s", f.Name, l.Algorithm, how), func(t *testing.T) {
					clock := NewClock(T0)
					s := f.New(t, clock.Now)
					h := &holdSteps{t: t, s: s, f: f, clock: clock, l: l,
						key: algorithms.Key{Scope: UniqueScope(t), Identifier: "user", Name: "llm"}}
					holdsClearedSequence(t, h, how)
				})
			}
		}
	}
}

func holdsClearedSequence(t *testing.T, h *holdSteps, how string) {
	ctx := context.Background()
	if d := h.hold("a", 4, false); !d.Allowed || d.Remaining != 6 {
		t.Fatalf("hold a of 4: %+v, want allowed, 6 left", d)
	}
	if how == "reset" {
		other := algorithms.GCRA
		if h.l.Algorithm == algorithms.GCRA {
			other = algorithms.FixedWindow
		}
		if _, err := h.s.Reset(ctx, h.key.Scope, h.key.Identifier, other); err != nil {
			t.Fatal(err)
		}
		if got := h.held(); got != 4 {
			t.Errorf("held after a reset of %s only: %d, want 4", other, got)
		}
	}
	var err error
	if how == "reset" {
		_, err = h.s.Reset(ctx, h.key.Scope, h.key.Identifier, "")
	} else {
		_, err = h.s.Clear(ctx, []algorithms.Request{{Key: h.key, Limit: h.l}})
	}
	if err != nil {
		t.Fatalf("%s: %v", how, err)
	}
	if got := h.held(); got != 0 {
		t.Errorf("held after the %s: %d, want 0", how, got)
	}
	if got := h.remaining(); got != 10 {
		t.Errorf("after the %s: %d left, want 10", how, got)
	}
	if r := h.settle("a", 4, false); r.Outcome != algorithms.Cleared {
		t.Errorf("commit of a after the %s: %+v, want cleared", how, r)
	}
	if r := h.settle("a", 0, true); r.Outcome != algorithms.Cleared {
		t.Errorf("cancel of a after the %s: %+v, want cleared", how, r)
	}
	if got := h.remaining(); got != 10 {
		t.Errorf("after a's commit: %d left, want 10 (the fresh counter never gets it)", got)
	}
	if d := h.hold("b", 3, false); !d.Allowed || d.Remaining != 7 {
		t.Fatalf("hold b of 3 after the %s: %+v, want allowed, 7 left", how, d)
	}
	if r := h.settle("b", 2, false); r.Outcome != algorithms.Settled || r.Held != 3 || r.Decision.Remaining != 8 {
		t.Errorf("commit 2 of b's 3: %+v, want settled, 8 left", r)
	}
	h.clock.Advance(time.Minute) // past a's expiry: still cleared, not expired
	if r := h.settle("a", 4, false); r.Outcome != algorithms.Cleared {
		t.Errorf("commit of a past its expiry: %+v, want cleared", r)
	}
}
