package descriptors

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Unit is the length of a rate-limit window. The values are those of
// envoy.service.ratelimit.v3.RateLimitResponse.RateLimit.Unit, so a Unit
// converts to the proto enum with a plain conversion.
type Unit int32

// The units of the descriptor YAML (case-insensitive there).
const (
	UnitUnknown Unit = 0
	Second      Unit = 1
	Minute      Unit = 2
	Hour        Unit = 3
	Day         Unit = 4
	Month       Unit = 5
	Year        Unit = 6
	Week        Unit = 7
)

var unitNames = map[Unit]string{
	UnitUnknown: "UNKNOWN",
	Second:      "SECOND",
	Minute:      "MINUTE",
	Hour:        "HOUR",
	Day:         "DAY",
	Month:       "MONTH",
	Year:        "YEAR",
	Week:        "WEEK",
}

// ParseUnit returns the unit named s, compared case-insensitively with the
// proto enum names (second, MINUTE, Hour, …). UNKNOWN and anything else is an
// error.
func ParseUnit(s string) (Unit, error) {
	up := strings.ToUpper(s)
	for u, name := range unitNames {
		if u != UnitUnknown && name == up {
			return u, nil
		}
	}
	return UnitUnknown, unitError(s)
}

// unitError is upstream's message for a unit it does not know, written as
// the configuration wrote it.
func unitError(written string) error {
	return fmt.Errorf("invalid rate limit unit '%s'", written)
}

// String returns the proto enum name of u (SECOND, MINUTE, …).
func (u Unit) String() string {
	if name, ok := unitNames[u]; ok {
		return name
	}
	return "Unit(" + strconv.Itoa(int(u)) + ")"
}

// Window returns the window length of u, as upstream's UnitToDivider: a
// month is 30 days and a year 365 days. It returns 0 for an unknown unit.
func (u Unit) Window() time.Duration {
	const day = 24 * time.Hour
	switch u {
	case Second:
		return time.Second
	case Minute:
		return time.Minute
	case Hour:
		return time.Hour
	case Day:
		return day
	case Week:
		return 7 * day
	case Month:
		return 30 * day
	case Year:
		return 365 * day
	}
	return 0
}
