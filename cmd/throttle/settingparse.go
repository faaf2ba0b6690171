package main

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/throttle-rl/throttle/algorithms"
)

// durationText is a default duration as a user would write it: 24h, 1m,
// 100ms (not time.Duration's 24h0m0s).
func durationText(d time.Duration) string {
	t := d.String()
	if strings.HasSuffix(t, "m0s") {
		t = strings.TrimSuffix(t, "0s")
	}
	if strings.HasSuffix(t, "h0m") {
		t = strings.TrimSuffix(t, "0m")
	}
	return t
}

// The parsers of the settings' types. Each error says what is wrong with
// the value; the caller puts the setting's name before it.

func parseInt(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("%q is not a number", v)
	}
	return n, nil
}

// parsePercent reads an integer from 1 to 100.
func parsePercent(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 100 {
		return 0, fmt.Errorf("%q is not a percent from 1 to 100", v)
	}
	return n, nil
}

func parseInt64(v string) (int64, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a number", v)
	}
	return n, nil
}

func parseBool(v string) (bool, error) {
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%q is not true or false", v)
	}
	return b, nil
}

// parseDuration reads a positive duration.
func parseDuration(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%q is not a positive duration such as 2s or 15ms", v)
	}
	return d, nil
}

// parseOptionalDuration is parseDuration, with empty meaning 0 (none).
func parseOptionalDuration(v string) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	return parseDuration(v)
}

// parseCIDRs reads comma-separated CIDRs; a bare address is its own /32 or
// /128.
func parseCIDRs(v string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, p := range strings.Split(v, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		prefix, err := netip.ParsePrefix(p)
		if err != nil {
			addr, aerr := netip.ParseAddr(p)
			if aerr != nil {
				return nil, fmt.Errorf("%q is not a CIDR such as 10.0.0.0/8", p)
			}
			prefix = netip.PrefixFrom(addr, addr.BitLen())
		}
		out = append(out, prefix.Masked())
	}
	return out, nil
}

func parseNonEmpty(v string) (string, error) {
	if v == "" {
		return "", fmt.Errorf("empty")
	}
	return v, nil
}

// parseReservationTTL reads MAX_RESERVATION_TTL: a duration above 0, at
// most algorithms.MaxHoldTTL.
func parseReservationTTL(v string) (time.Duration, error) {
	d, err := parseDuration(v)
	if err == nil && d > algorithms.MaxHoldTTL {
		err = fmt.Errorf("%q is longer than %s", v, algorithms.MaxHoldTTL)
	}
	return d, err
}

// parseShare reads a number above 0 and at most 1.
func parseShare(v string) (float64, error) {
	f, err := parseFraction(v)
	if err != nil || f == 0 {
		return 0, fmt.Errorf("%q is not a number above 0 and at most 1", v)
	}
	return f, nil
}
