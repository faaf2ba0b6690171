package redisstore

import (
	"hash/maphash"
	"sync"
)

// knownCounters are the window counters a master is known to hold
// (this store made them or counted on them), so that a decision on one is
// a lone INCRBY: it has its TTL. Keys name their window, so a known key is
// asked only while its window lasts; the set is emptied when it reaches
// knownMax keys rather than swept. A known counter that was deleted
// meanwhile is seen (INCRBY says the hits alone) and given its TTL.
//
// The set holds 64-bit hashes of the keys, not the keys: a map without
// pointers, which the garbage collector does not scan (65,536 strings made
// each of its mark phases last 8-15 ms under load, and the tail latency
// with them). Two keys of one hash make the second known too soon: its
// first INCRBY makes it, says so, and gives it its TTL.
type knownCounters struct {
	mu   sync.Mutex
	seed maphash.Seed
	keys map[uint64]struct{}
}

// knownMax bounds the set (made at its full size: it fills in a
// window or two under load): 16 bytes a key.
const knownMax = 1 << 16

// lookup notes in each op the hash of its key and whether its counter is
// known.
func (k *knownCounters) lookup(ops []plainOp) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.keys == nil {
		k.seed, k.keys = maphash.MakeSeed(), make(map[uint64]struct{}, knownMax)
	}
	for i := range ops {
		ops[i].hash = maphash.String(k.seed, ops[i].key)
		_, ops[i].known = k.keys[ops[i].hash]
	}
}

// add notes the counters the ops counted on (after lookup).
func (k *knownCounters) add(ops []plainOp) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for i := range ops {
		if !ops[i].counted() {
			continue
		}
		if len(k.keys) >= knownMax {
			clear(k.keys)
		}
		k.keys[ops[i].hash] = struct{}{}
	}
}
