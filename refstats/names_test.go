package refstats

import "testing"

// TestSanitize: the reference's stat names of keys with statsd's separators
// and IPv4 addresses in them (its TestEscapingInvalidChartersInMetricName,
// and SanitizeStatName's addresses).
func TestSanitize(t *testing.T) {
	for _, tt := range []struct{ key, want string }{
		{"path_/foo/bar", "path_/foo/bar"},
		{"path_/foo:*:bar", "path_/foo_*_bar"},
		{"path_/foo|bar|baz", "path_/foo_bar_baz"},
		{"path_/foo:bar|baz", "path_/foo_bar_baz"},
		{"edge.remote_address_10.0.0.1", "edge.remote_address_10_0_0_1"},
		{"edge.remote_address_192.168.100.200.path_/a.b", "edge.remote_address_192_168_100_200.path_/a.b"},
		{"edge.ip_1.2.3.4:8080", "edge.ip_1_2_3_4_8080"},
		{"edge.version_1.2.3", "edge.version_1.2.3"},   // three parts: not an address
		{"edge.x_1234.5.6.7", "edge.x_1234_5_6_7"},     // 234.5.6.7 within it looks like one
		{"edge.v6_2001:db8::1", "edge.v6_2001_db8__1"}, // IPv6: its colons only
		{"d.a_1.2.3.4.5.6.7.8", "d.a_1_2_3_4.5_6_7_8"}, // two addresses, one after the other
		// What a request may carry: no line, tag or level of its own.
		{"zz\nINJECTED\nx", "zz_INJECTED_x"},
		{"edge.v_x.__k=v", "edge.v_x._k=v"},
		{"edge.v_x.____k", "edge.v_x._k"},
		{"edge.v_a#b c\x00d\u2028e", "edge.v_a_b_c_d_e"},
		{"edge.v_\xff\xfe", "edge.v__"},
		{"edge.é", "edge.é"},
	} {
		if got := sanitize(tt.key); got != tt.want {
			t.Errorf("sanitize(%q) = %q, want %q", tt.key, got, tt.want)
		}
	}
}

// TestDescriptorStat: the stat names of the reference's stats keys
// (test/config/config_test.go of envoyproxy/ratelimit), detailed_metric
// ones included; the domain is part of the key.
func TestDescriptorStat(t *testing.T) {
	for _, tt := range []struct{ domain, key, stat, want string }{
		{"test-domain", "key1_value1.subkey1", TotalHits, "test-domain.key1_value1.subkey1.total_hits"},
		{"test-domain", "key1_value1.subkey1_subvalue1", OverLimit, "test-domain.key1_value1.subkey1_subvalue1.over_limit"},
		{"test-domain", "key7_unspecified_value", NearLimit, "test-domain.key7_unspecified_value.near_limit"},
		{"test-domain", "key2_value2", WithinLimit, "test-domain.key2_value2.within_limit"},
		{"d:1", "k|v", ShadowMode, "d_1.k_v.shadow_mode"},
		{"edge", "remote_address_10.1.2.3", OverLimitWithLocalCache, "edge.remote_address_10_1_2_3.over_limit_with_local_cache"},
	} {
		if got := descriptorStat(tt.domain, tt.key, tt.stat); got != tt.want {
			t.Errorf("descriptorStat(%q, %q, %q) = %q, want %q", tt.domain, tt.key, tt.stat, got, tt.want)
		}
	}
}

func TestMethodName(t *testing.T) {
	for in, want := range map[string]string{
		"/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit": "ShouldRateLimit",
		"/grpc.health.v1.Health/Check":                                 "Check",
		"envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit":  "ShouldRateLimit",
		"/nomethod": "unknown",
	} {
		if got := methodName(in); got != want {
			t.Errorf("methodName(%q) = %q, want %q", in, got, want)
		}
	}
}
