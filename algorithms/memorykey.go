package algorithms

import (
	"hash/maphash"
	"math"
)

// The algorithms' numbers in a memoryKey.
const (
	fixedWindowN byte = iota + 1
	slidingWindowN
	tokenBucketN
	gcraN
)

// memoryKey names one limit's state on one identifier: the same parts, with
// the same meaning, as its identifier and StateName. A named limit is its
// algorithm and name (limit, windowMS and refill stay zero); an unnamed one
// is its algorithm, limit, window in whole ms and, for a token bucket, its
// refill rate (name stays empty). A window algorithm's key also has its
// window in µs, named or not.
type memoryKey struct {
	scope, identifier, name string
	limitKey
}

// limitKey is the part of a memoryKey that is numbers: worked out for each
// request, while the strings are compared where the request holds them.
type limitKey struct {
	limit, windowMS, windowUS int64
	refill                    float64
	alg                       byte // memoryAlg of the algorithm
}

// memoryKeyOf returns the key of key and lk.
func memoryKeyOf(key *Key, lk *limitKey) memoryKey {
	return memoryKey{scope: key.Scope, identifier: key.Identifier, name: key.Name, limitKey: *lk}
}

// is reports whether k is the key of key and lk.
func (k *memoryKey) is(key *Key, lk *limitKey) bool {
	return k.limitKey == *lk && k.identifier == key.Identifier && k.scope == key.Scope && k.name == key.Name
}

// spot is where a request's state lives: the numbers of its key (the
// strings are the request's Key), the key's hash and shard, and a token
// bucket's refill rate, worked out once. It holds no string: writing one
// into memory a caller owns costs a write barrier while the GC runs.
type spot struct {
	lk   limitKey
	h    uint64
	sh   *memoryShard
	rate float64
}

// place sets p to r's spot. (A spot returned by value is written in words
// and copied in wider ones, which stalls the CPU.)
func (s *MemoryStore) place(r *Request, p *spot) {
	p.rate = 0
	if r.Limit.Algorithm == TokenBucket {
		p.rate = r.Limit.Refill()
	}
	p.lk.set(r, p.rate)
	idHash := s.identityHash(r.Key.Scope, r.Key.Identifier)
	p.h = s.keyHash(&r.Key, &p.lk, idHash)
	p.sh = s.shard(idHash)
}

// memoryAlg returns a's number in a memoryKey.
func memoryAlg(a Algorithm) byte {
	switch a {
	case FixedWindow:
		return fixedWindowN
	case SlidingWindow:
		return slidingWindowN
	case TokenBucket:
		return tokenBucketN
	case GCRA:
		return gcraN
	}
	return 0
}

// set sets lk to the numbers of r's key. rate is r.Limit.Refill() for a
// token bucket. (It sets lk in place: a limitKey returned by value is
// written in words and read back in wider ones, which stalls the CPU.)
func (lk *limitKey) set(r *Request, rate float64) {
	*lk = limitKey{alg: memoryAlg(r.Limit.Algorithm)}
	if r.Key.Name == "" {
		lk.limit, lk.windowMS = r.Limit.Limit, r.Limit.Window.Milliseconds()
		if lk.alg == tokenBucketN {
			lk.refill = rate
		}
	}
	if lk.alg == fixedWindowN || lk.alg == slidingWindowN {
		lk.windowUS = r.Limit.Window.Microseconds()
	}
}

// keyHash returns the hash of the key of key and lk, given idHash, the hash
// of its (scope, identifier). Every part that a client chooses is hashed
// with the store's random seed, so no one can pick keys that share a hash
// on purpose.
func (s *MemoryStore) keyHash(key *Key, lk *limitKey, idHash uint64) uint64 {
	var h uint64 // the hash of the parts that name the limit
	if key.Name != "" {
		h = maphash.String(s.seed, key.Name)
	} else {
		h = fmix(uint64(lk.limit)^s.salt[0]) ^ fmix(uint64(lk.windowMS)^s.salt[1]) ^ fmix(math.Float64bits(lk.refill)^s.salt[2])
	}
	if lk.windowUS != 0 {
		h ^= fmix(uint64(lk.windowUS) ^ s.salt[1] ^ s.salt[2])
	}
	return idHash ^ h ^ uint64(lk.alg)
}

// identityHash is the hash of (scope, identifier).
func (s *MemoryStore) identityHash(scope, identifier string) uint64 {
	return maphash.String(s.seed, scope)*0x9e3779b97f4a7c15 ^ maphash.String(s.seed, identifier)
}

// fmix is MurmurHash3's 64-bit finalizer: each bit of x changes about half
// the bits of the result.
func fmix(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	return x ^ x>>33
}
