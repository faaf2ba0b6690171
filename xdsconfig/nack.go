package xdsconfig

import (
	"crypto/sha256"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"
)

// A control plane answers a NACK by sending its snapshot again at once, so
// a snapshot that does not load (or two that take turns) would reload and
// NACK in a tight loop. The client pauses before every NACK that follows
// another without a loaded response in between, repeatPause at first, then
// twice as long each time up to maxRepeatPause; a response that loads ends
// the pause. A fixed snapshot then waits at most the pause in progress.
const (
	repeatPause    = time.Second
	maxRepeatPause = 16 * time.Second
)

// recentRefusals is how many refused responses (their digests) the client
// remembers: one of them sent again is refused again without another log
// line, metric or OnLoad call, even when others came in between.
const recentRefusals = 8

// maxNackDetail caps a NACK's error_detail message and its log line, in
// bytes: a snapshot's errors quote its names, which the control plane
// chooses, and a control plane stores or shows what it gets back.
const maxNackDetail = 4 << 10

// refusals is the client's memory of the responses it refused since it
// last loaded one: their digests, newest last, and the pause before the
// next NACK.
type refusals struct {
	digests [][sha256.Size]byte
	pause   time.Duration
}

// seen reports whether sum is a response refused lately, and remembers it
// (forgetting the oldest beyond recentRefusals).
func (r *refusals) seen(sum [sha256.Size]byte) bool {
	if i := slices.Index(r.digests, sum); i >= 0 {
		r.digests = append(slices.Delete(r.digests, i, i+1), sum)
		return true
	}
	if len(r.digests) == recentRefusals {
		r.digests = slices.Delete(r.digests, 0, 1)
	}
	r.digests = append(r.digests, sum)
	return false
}

// nextPause returns how long to wait before this NACK: nothing for the
// first since a response loaded, then repeatPause, doubled each time up to
// maxRepeatPause.
func (r *refusals) nextPause() time.Duration {
	p := r.pause
	r.pause = min(max(2*r.pause, repeatPause), maxRepeatPause)
	return p
}

// capDetail is msg cut to at most maxNackDetail bytes, on a character's
// boundary, saying how much was cut.
func capDetail(msg string) string {
	if len(msg) <= maxNackDetail {
		return msg
	}
	const room = 40 // for the suffix: "… (", up to 20 digits, " bytes more)"
	cut := maxNackDetail - room
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + fmt.Sprintf("… (%d bytes more)", len(msg)-cut)
}
