package descriptors

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestUnit(t *testing.T) {
	for u, w := range map[Unit]time.Duration{Second: time.Second, Minute: time.Minute, Hour: time.Hour, Day: 24 * time.Hour,
		Week: 7 * 24 * time.Hour, Month: 30 * 24 * time.Hour, Year: 365 * 24 * time.Hour, UnitUnknown: 0} {
		if got := u.Window(); got != w {
			t.Errorf("%s.Window() = %s, want %s", u, got, w)
		}
	}
	for _, s := range []string{"second", "SECOND", "Second", "week", "MONTH"} {
		if u, err := ParseUnit(s); err != nil || !strings.EqualFold(u.String(), s) {
			t.Errorf("ParseUnit(%q) = %s, %v", s, u, err)
		}
	}
	for _, s := range []string{"", "unknown", "UNKNOWN", "seconds", "fortnight"} {
		if _, err := ParseUnit(s); err == nil || err.Error() != fmt.Sprintf("invalid rate limit unit '%s'", s) {
			t.Errorf("ParseUnit(%q) error = %v", s, err)
		}
	}
}
