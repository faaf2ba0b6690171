package main

import (
	"errors"
	"fmt"
	"net/url"
	"reflect"
	"strings"

	"github.com/redis/go-redis/v9"
)

// redisURLTarget reads a redis:// or rediss:// REDIS_URL: a single Redis,
// Sentinel (?master_name=; the host is a Sentinel, more with &addr=) or
// Cluster (?cluster=true, more nodes with &addr=), every other query option
// go-redis's. REDIS_TYPE may say the same (cluster also turns a URL without
// ?cluster=true into a Cluster's seed), and the reference's other settings
// may add what the URL leaves out; a setting that contradicts the URL, or
// sets what it sets already, is refused by name.
func redisURLTarget(rc redisConfig, prefix string) (*redisTarget, error) {
	u, err := url.Parse(rc.URL)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the URL it quotes
		}
		return nil, fmt.Errorf("%sURL %s: %w", prefix, redactURL(rc.URL), err)
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		return nil, fmt.Errorf("%sURL: must start with redis:// or rediss://, or be host:port, a unix socket's path, or a list (mymaster,host:port… with %sTYPE=sentinel; host:port,… with %sTYPE=cluster)", prefix, prefix, prefix)
	}
	q := u.Query()
	kind := redisSingle
	switch {
	case q.Get("cluster") == "true":
		kind = redisCluster
	case q.Get("master_name") != "":
		kind = redisSentinel
	}
	if err := urlContradictions(rc, prefix, u, kind); err != nil {
		return nil, err
	}
	if rc.Type == redisCluster {
		kind = redisCluster
	}
	q.Del("cluster")
	u.RawQuery = q.Encode()
	var parsed any
	switch kind {
	case redisCluster:
		parsed, err = redis.ParseClusterURL(u.String())
	case redisSentinel:
		parsed, err = redis.ParseFailoverURL(u.String())
	default:
		parsed, err = redis.ParseURL(u.String())
	}
	if err != nil {
		return nil, fmt.Errorf("%sURL (%s): %w", prefix, kind, err)
	}
	t := &redisTarget{kind: kind, network: "tcp", given: map[string]bool{}}
	for name := range q {
		t.given[name] = true
	}
	if err := universal(parsed, t); err != nil {
		return nil, fmt.Errorf("%sURL (%s): %w", prefix, kind, err)
	}
	return t, nil
}

// urlContradictions refuses the reference service's settings that
// contradict a redis:// URL of kind (single, sentinel, cluster), or set
// what it sets already: one value, given once.
func urlContradictions(rc redisConfig, prefix string, u *url.URL, kind string) error {
	q := u.Query()
	var errs []error
	refuse := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	switch {
	case rc.Type == "" || rc.Type == kind || (rc.Type == redisCluster && kind == redisSingle):
	case rc.Type == redisSentinel:
		refuse("%sTYPE=sentinel needs the master's name: add ?master_name=mymaster to %sURL, or give %sURL as mymaster,host:port…", prefix, prefix, prefix)
	default:
		option := map[string]string{redisCluster: "?cluster=true", redisSentinel: "?master_name="}[kind]
		refuse("%sTYPE=%s contradicts %sURL, whose %s makes it a %s: give the kind once", prefix, rc.Type, prefix, option, kind)
	}
	if rc.SocketType == "unix" {
		refuse("%sSOCKET_TYPE=unix contradicts a %s:// %sURL (TCP): give the socket's path as %sURL", prefix, u.Scheme, prefix, prefix)
	}
	if rc.TLS && u.Scheme == "redis" {
		refuse("%sTLS=true contradicts a redis:// %sURL: use rediss:// (TLS), or leave %sTLS out", prefix, prefix, prefix)
	}
	_, userPassword := u.User.Password()
	authInURL, sentinelAuthInURL := userPassword, false
	if kind == redisSentinel { // go-redis: the user info is the Sentinels', ?password= the master's
		authInURL, sentinelAuthInURL = q.Has("password") || q.Has("username"), userPassword
	}
	if rc.Auth != "" && authInURL {
		refuse("%sAUTH and a password in %sURL: give the password once", prefix, prefix)
	}
	if rc.SentinelAuth != "" && sentinelAuthInURL {
		refuse("%sSENTINEL_AUTH and a Sentinel password in %sURL (its user info): give the password once", prefix, prefix)
	}
	if rc.PoolSize > 0 && q.Has("pool_size") {
		refuse("%sPOOL_SIZE and %sURL's pool_size= both set: give it once", prefix, prefix)
	}
	if rc.Timeout > 0 && (q.Has("dial_timeout") || q.Has("read_timeout") || q.Has("write_timeout")) {
		refuse("%sTIMEOUT and %sURL's dial_timeout=, read_timeout= or write_timeout= both set: give them once", prefix, prefix)
	}
	return errors.Join(errs...)
}

// universal copies the options go-redis parsed of a URL (*redis.Options,
// *redis.FailoverOptions or *redis.ClusterOptions) into t.opts, every field
// that redis.UniversalOptions has by the same name and type, and the
// addresses, network and ReplicaOnly by theirs: one conversion for the three
// kinds, which a new go-redis option cannot slip through unseen. An option
// set that UniversalOptions cannot hold is an error, not a loss.
func universal(parsed any, t *redisTarget) error {
	src := reflect.ValueOf(parsed).Elem()
	dst := reflect.ValueOf(&t.opts).Elem()
	for i := range src.NumField() {
		f, v := src.Type().Field(i), src.Field(i)
		if !f.IsExported() || v.IsZero() {
			continue
		}
		switch f.Name {
		case "Addr":
			t.opts.Addrs = []string{v.String()}
			continue
		case "SentinelAddrs":
			t.opts.Addrs = v.Interface().([]string)
			continue
		case "Network":
			t.network = v.String()
			continue
		case "ReplicaOnly":
			t.opts.ReadOnly = v.Bool()
			continue
		}
		d := dst.FieldByName(f.Name)
		if !d.IsValid() || d.Type() != f.Type {
			return fmt.Errorf("option %s is not supported here", strings.ToLower(f.Name))
		}
		d.Set(v)
	}
	return nil
}
