package quotasvc

import (
	"sort"
	"strconv"
	"strings"

	"github.com/throttle-rl/throttle/descriptors"
)

// A bucket (BucketId, a map of strings) is the request descriptor of its
// entries sorted by key: {name: api} is [name=api], {user: alice, name: api}
// is [name=api, user=alice]. docs/rlqs.md gives the mapping in full.

const (
	// maxBucketEntries and maxBucketBytes bound one BucketId; a larger one
	// is ignored and counted.
	maxBucketEntries = 16
	maxBucketBytes   = 4096
	// maxBucketsPerStream bounds the buckets one instance subscribes to.
	maxBucketsPerStream = 10000
	// maxReportCount is the most requests one report may count, allowed or
	// denied (a million a second for twelve days); more is absurd, ignored
	// and counted.
	maxReportCount = 1 << 40
)

// bucketEntries is the descriptor a bucket maps to: its entries sorted by
// key.
func bucketEntries(id map[string]string) []descriptors.Entry {
	es := make([]descriptors.Entry, 0, len(id))
	for k, v := range id {
		es = append(es, descriptors.Entry{Key: k, Value: v})
	}
	sort.Slice(es, func(i, j int) bool { return es[i].Key < es[j].Key })
	return es
}

// bucketKey is a bucket's identity: its sorted entries, each key and value
// length-prefixed, so equal maps give equal keys and different maps
// different ones.
func bucketKey(es []descriptors.Entry) string {
	var b strings.Builder
	for _, e := range es {
		b.WriteString(strconv.Itoa(len(e.Key)))
		b.WriteByte(':')
		b.WriteString(e.Key)
		b.WriteString(strconv.Itoa(len(e.Value)))
		b.WriteByte(':')
		b.WriteString(e.Value)
	}
	return b.String()
}

// checkBucket says why a BucketId is refused ("" when it is not): the
// reason label of throttle_rlqs_reports_ignored_total.
func checkBucket(id map[string]string) string {
	if len(id) == 0 {
		return "empty_bucket_id"
	}
	if len(id) > maxBucketEntries {
		return "bucket_id_too_large"
	}
	n := 0
	for k, v := range id {
		if k == "" || v == "" {
			return "empty_bucket_entry"
		}
		n += len(k) + len(v)
	}
	if n > maxBucketBytes {
		return "bucket_id_too_large"
	}
	return ""
}
