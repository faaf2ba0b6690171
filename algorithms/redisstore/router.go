package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttle-rl/throttle/algorithms"
)

// The router sends each call of the store to the Redis master that holds
// its keys. It alone knows whether there is one master or several: which
// master serves a key, every master, how a call's keys are packed, and the
// redirect-then-retry. A single Redis, or Sentinel's master, is a Cluster
// of one master whose slot table never changes.
//
// In a Cluster the unit of failure is the master: one can die while the
// others answer. The store therefore routes every request itself, to the
// master that serves its slot (read from CLUSTER SLOTS), and sends each
// master its own calls through a client of its own: a master's failure is
// that master's (Guard keeps a circuit breaker per master), and no call
// wanders across the Cluster following redirects while its caller's
// deadline runs out, as go-redis's ClusterClient would (it retries another
// node on a connection error and follows up to MaxRedirects MOVED replies).
// A MOVED or ASK reply means the script did not run (Redis checks the slots
// of a call's keys before running it), so a call that gets one reloads the
// slot table and is sent once more, to the new owner, within its budget.

// clusterSlots is the number of hash slots of a Redis Cluster.
const clusterSlots = 16384

// Topology refreshes: how often a Cluster's slot table is read while every
// master answers, and the least time between two reads when something
// failed.
const (
	topologyEvery    = 5 * time.Second
	topologyMinEvery = 250 * time.Millisecond
)

// topology is one reading of the slot table: the master of every slot (the
// unassigned placeholder when none serves it), or the one master of a single
// Redis.
type topology struct {
	one     *master   // a single Redis: every key's master; nil on a Cluster
	slots   []*master // a Cluster's: clusterSlots long
	masters []*master // the masters that serve slots now; the unassigned placeholder among them when a slot has none
	read    bool      // false until the first read was tried
	// first is, for each slot of a Cluster's, the first slot of the run of
	// slots its master serves that holds it: where the master's index of
	// holds lives (holds.go).
	first []uint16
}

// router keeps the slot table and a client per master.
type router struct {
	topo atomic.Pointer[topology]
	// keyOf is the key whose slot routes a request: its identifier's
	// index key, whose hash tag every key of the identifier shares.
	keyOf func(scope, identifier string) string

	// A Cluster's (nil for a single Redis): the seed client, whose options
	// make the masters' clients and whose nodes seed CLUSTER SLOTS.
	seed       *redis.ClusterClient
	unassigned *master
	newMaster  func(name string, client *redis.Client) *master

	// readMu makes one read of the slot table at a time; it guards what
	// follows.
	readMu   sync.Mutex
	byAddr   map[string]*master // every master ever seen, by address; closed by close
	lastRead time.Time          // when the last read began
	stop     context.CancelFunc
	done     chan struct{}
}

// newSingleRouter routes every call to one master.
func newSingleRouter(sh *master, keyOf func(scope, identifier string) string) *router {
	r := &router{keyOf: keyOf, byAddr: map[string]*master{sh.name: sh}, stop: func() {}, done: make(chan struct{})}
	close(r.done)
	r.topo.Store(&topology{one: sh, masters: []*master{sh}, read: true})
	return r
}

// newClusterRouter routes calls to the masters of a Cluster, reading its
// slot table at once and then every topologyEvery until close.
func newClusterRouter(cc *redis.ClusterClient, keyOf func(scope, identifier string) string, newMaster func(string, *redis.Client) *master) *router {
	r := &router{
		keyOf:      keyOf,
		seed:       cc,
		unassigned: &master{name: "unassigned", ping: func(context.Context) error { return errNoMaster }},
		newMaster:  newMaster,
		byAddr:     map[string]*master{},
		done:       make(chan struct{}),
	}
	t := &topology{slots: make([]*master, clusterSlots)}
	for i := range t.slots {
		t.slots[i] = r.unassigned
	}
	r.topo.Store(t)
	ctx, stop := context.WithCancel(context.Background())
	r.stop = stop
	go r.run(ctx)
	return r
}

// cluster reports whether the masters are a Cluster's: then a call's keys
// may lie in several slots of its master (pack).
func (r *router) cluster() bool { return r.seed != nil }

// run reads the slot table at once and then every topologyEvery, until close.
func (r *router) run(ctx context.Context) {
	defer close(r.done)
	tick := time.NewTicker(topologyEvery)
	defer tick.Stop()
	for {
		r.refresh(ctx, time.Now())
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// masterOf returns the master that serves key's slot, as last read.
func (r *router) masterOf(key string) *master {
	t := r.topo.Load()
	if t.one != nil {
		return t.one
	}
	return t.slots[keySlot(key)]
}

// masterOfRequest returns the master of req's keys, as last read.
func (r *router) masterOfRequest(req *algorithms.Request) *master {
	if t := r.topo.Load(); t.one != nil {
		return t.one // no key to build
	}
	return r.masterOf(r.keyOf(req.Key.Scope, req.Key.Identifier))
}

// ready reads the slot table unless it was read (or tried) already: the
// first calls must not find every slot unassigned.
func (r *router) ready(ctx context.Context) {
	if r.topo.Load().read {
		return
	}
	r.refresh(ctx, time.Time{})
}

// masters returns the masters that serve slots now, as last read.
func (r *router) masters() []*master { return r.topo.Load().masters }

// refresh reads CLUSTER SLOTS and swaps the slot table, unless a read began
// after since (a caller that saw a redirect at since needs a table read
// after it, and one read serves every such caller). One read runs at a time.
// It returns whether the table is now from a read that began after since:
// always for a single Redis, whose table never changes.
func (r *router) refresh(ctx context.Context, since time.Time) bool {
	if !r.cluster() {
		return true
	}
	r.readMu.Lock()
	defer r.readMu.Unlock()
	if r.lastRead.After(since) {
		return r.topo.Load().read
	}
	r.lastRead = time.Now()
	slots, err := r.readSlots(ctx)
	if err != nil {
		if t := r.topo.Load(); !t.read {
			// Tried: the first calls go to the failure policy now
			// rather than each waiting on another read.
			r.topo.Store(&topology{slots: t.slots, masters: []*master{r.unassigned}, read: true})
		}
		return false
	}
	r.topo.Store(r.topologyOf(slots))
	return true
}

// topologyOf is the slot table of a CLUSTER SLOTS reply, with a master for
// each address not seen before.
func (r *router) topologyOf(slots []redis.ClusterSlot) *topology {
	t := &topology{slots: make([]*master, clusterSlots), read: true}
	for i := range t.slots {
		t.slots[i] = r.unassigned
	}
	seen := map[*master]bool{}
	for _, s := range slots {
		if len(s.Nodes) == 0 || s.Start < 0 || s.End >= clusterSlots || s.Start > s.End {
			continue
		}
		addr := s.Nodes[0].Addr // the master comes first
		sh, ok := r.byAddr[addr]
		if !ok {
			sh = r.newMaster(addr, redis.NewClient(nodeOptions(r.seed.Options(), addr)))
			r.byAddr[addr] = sh
		}
		if !seen[sh] {
			seen[sh] = true
			t.masters = append(t.masters, sh)
		}
		for i := s.Start; i <= s.End; i++ {
			t.slots[i] = sh
		}
	}
	for _, sh := range t.slots {
		if sh == r.unassigned {
			t.masters = append(t.masters, sh)
			break
		}
	}
	t.first = make([]uint16, clusterSlots)
	for i := 1; i < clusterSlots; i++ {
		if t.slots[i] == t.slots[i-1] {
			t.first[i] = t.first[i-1]
		} else {
			t.first[i] = uint16(i)
		}
	}
	return t
}

// readSlots asks the known masters, then the seed nodes, for CLUSTER SLOTS,
// and returns the first answer. Each try gets a short deadline of its own, so
// a dead node costs little.
func (r *router) readSlots(ctx context.Context) ([]redis.ClusterSlot, error) {
	ask := func(c interface {
		ClusterSlots(context.Context) *redis.ClusterSlotsCmd
	}) ([]redis.ClusterSlot, error) {
		cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		return c.ClusterSlots(cctx).Result()
	}
	var firstErr error
	for _, sh := range r.masters() {
		c, ok := sh.client.(*redis.Client)
		if !ok {
			continue
		}
		if slots, err := ask(c); err == nil {
			return slots, nil
		} else if firstErr == nil {
			firstErr = err
		}
	}
	for _, addr := range r.seed.Options().Addrs {
		c := redis.NewClient(nodeOptions(r.seed.Options(), addr))
		slots, err := ask(c)
		c.Close()
		if err == nil {
			return slots, nil
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	if firstErr == nil {
		firstErr = errors.New("no Cluster node to ask")
	}
	return nil, fmt.Errorf("read the Cluster's slots: %w", firstErr)
}

// close stops the refreshes and, for every master, its coalescing workers
// and the client the router made for it.
func (r *router) close() error {
	r.stop()
	<-r.done
	r.readMu.Lock()
	defer r.readMu.Unlock()
	var errs []error
	for _, sh := range r.byAddr {
		if sh.merge != nil {
			sh.merge.close()
		}
		errs = append(errs, sh.close())
	}
	return errors.Join(errs...)
}

// pack returns the keys and arguments of one call to a master: as they
// are on a single Redis; on a Cluster only the first key is declared (it
// routes the call) and the others ride in ARGV: args[at], "" until then,
// becomes the number of keys, and the keys follow it. (A script of several
// slots of one master runs with allow-cross-slot-keys.)
func (r *router) pack(keys []string, args []any, at int) ([]string, []any) {
	if !r.cluster() || len(keys) == 0 {
		return keys, args
	}
	out := make([]any, 0, len(args)+len(keys))
	out = append(out, args[:at]...)
	out = append(out, strconv.Itoa(len(keys)))
	for _, k := range keys {
		out = append(out, k)
	}
	return keys[:1], append(out, args[at+1:]...)
}

// onKey runs call on the master of key, and once more on its new master
// when the first answered a redirect.
func (r *router) onKey(ctx context.Context, key string, call func(sh *master) error) error {
	r.ready(ctx)
	for attempt := 0; ; attempt++ {
		sent := time.Now()
		sh := r.masterOf(key)
		if sh.client == nil {
			return errNoMaster
		}
		err := call(sh)
		if attempt > 0 || !isRedirect(err) || !r.refresh(ctx, sent) {
			return err
		}
	}
}

// each runs call on every master at once, after reading the slot table if
// it never was, and returns each master's error, in the order of masters.
func (r *router) each(ctx context.Context, call func(ctx context.Context, sh *master) error) ([]*master, []error) {
	r.ready(ctx)
	masters := r.masters()
	errs := make([]error, len(masters))
	var wg sync.WaitGroup
	for i, sh := range masters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = call(ctx, sh)
		}()
	}
	wg.Wait()
	return masters, errs
}
