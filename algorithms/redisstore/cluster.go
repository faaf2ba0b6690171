package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis Cluster routing. In a Cluster the unit of failure is the master: one
// can die while the others answer. The store therefore routes every request
// itself, to the master that serves its slot (read from CLUSTER SLOTS), and
// sends each master its own calls through a client of its own: a master's
// failure is that master's (Guard keeps a circuit breaker per master), and no
// call wanders across the Cluster following redirects while its caller's
// deadline runs out, as go-redis's ClusterClient would (it retries another
// node on a connection error and follows up to MaxRedirects MOVED replies).
// A MOVED or ASK reply means the script did not run (Redis checks the slots
// of a call's keys before running it), so a call that gets one reloads the
// slot table and is sent once more, to the new owner, within its budget.

// clusterSlots is the number of hash slots of a Redis Cluster.
const clusterSlots = 16384

// Topology refreshes: how often the slot table is read while every master
// answers, and the least time between two reads when something failed.
const (
	topologyEvery    = 5 * time.Second
	topologyMinEvery = 250 * time.Millisecond
)

// topology is one reading of the Cluster's slot table: the master of every
// slot (the unassigned shard when none serves it).
type topology struct {
	slots   [clusterSlots]*shard
	masters []*shard // the shards that serve slots now; the unassigned shard among them when a slot has none
	read    bool     // false until the first read was tried
}

// clusterRouter keeps the slot table of a Redis Cluster and a client per
// master.
type clusterRouter struct {
	seed       *redis.ClusterClient // its options make the masters' clients; its nodes seed CLUSTER SLOTS
	topo       atomic.Pointer[topology]
	unassigned *shard
	newShard   func(name string, client *redis.Client) *shard

	// readMu makes one read of the slot table at a time; it guards what
	// follows.
	readMu   sync.Mutex
	shards   map[string]*shard // every master ever seen, by address; closed by close
	lastRead time.Time         // when the last read began
	stop     context.CancelFunc
	done     chan struct{}
}

func newClusterRouter(cc *redis.ClusterClient, newShard func(string, *redis.Client) *shard) *clusterRouter {
	r := &clusterRouter{
		seed:       cc,
		unassigned: &shard{name: "unassigned", ping: func(context.Context) error { return errNoMaster }},
		newShard:   newShard,
		shards:     map[string]*shard{},
		done:       make(chan struct{}),
	}
	t := &topology{}
	for i := range t.slots {
		t.slots[i] = r.unassigned
	}
	r.topo.Store(t)
	ctx, stop := context.WithCancel(context.Background())
	r.stop = stop
	go r.run(ctx)
	return r
}

// run reads the slot table at once and then every topologyEvery, until close.
func (r *clusterRouter) run(ctx context.Context) {
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

// shardOf returns the master that serves key's slot, as last read.
func (r *clusterRouter) shardOf(key string) *shard {
	return r.topo.Load().slots[keySlot(key)]
}

// ready reads the slot table unless it was read (or tried) already: the
// first calls must not find every slot unassigned.
func (r *clusterRouter) ready(ctx context.Context) {
	if r.topo.Load().read {
		return
	}
	r.refresh(ctx, time.Time{})
}

// masters returns the shards that serve slots now.
func (r *clusterRouter) masters() []*shard { return r.topo.Load().masters }

// refresh reads CLUSTER SLOTS and swaps the slot table, unless a read began
// after since (a caller that saw a redirect at since needs a table read
// after it, and one read serves every such caller). One read runs at a time.
// It returns whether the table is now from a read that began after since.
func (r *clusterRouter) refresh(ctx context.Context, since time.Time) bool {
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
			r.topo.Store(&topology{slots: t.slots, masters: []*shard{r.unassigned}, read: true})
		}
		return false
	}
	t := &topology{read: true}
	for i := range t.slots {
		t.slots[i] = r.unassigned
	}
	seen := map[*shard]bool{}
	for _, s := range slots {
		if len(s.Nodes) == 0 || s.Start < 0 || s.End >= clusterSlots || s.Start > s.End {
			continue
		}
		addr := s.Nodes[0].Addr // the master comes first
		sh, ok := r.shards[addr]
		if !ok {
			sh = r.newShard(addr, redis.NewClient(nodeOptions(r.seed.Options(), addr)))
			r.shards[addr] = sh
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
	r.topo.Store(t)
	return true
}

// readSlots asks the known masters, then the seed nodes, for CLUSTER SLOTS,
// and returns the first answer. Each try gets a short deadline of its own, so
// a dead node costs little.
func (r *clusterRouter) readSlots(ctx context.Context) ([]redis.ClusterSlot, error) {
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

// close stops the refreshes and closes every master's client.
func (r *clusterRouter) close() error {
	r.stop()
	<-r.done
	r.readMu.Lock()
	defer r.readMu.Unlock()
	var errs []error
	for _, sh := range r.shards {
		if sh.merge != nil {
			sh.merge.close()
		}
		errs = append(errs, sh.close())
	}
	return errors.Join(errs...)
}

// nodeOptions are the options of the client of one Cluster node: the
// Cluster's own settings (from REDIS_URL), for one address. The Cluster
// settings that matter are chosen in cmd/throttle (see newRedis there).
func nodeOptions(co *redis.ClusterOptions, addr string) *redis.Options {
	return &redis.Options{
		Addr:                  addr,
		ClientName:            co.ClientName,
		Dialer:                co.Dialer,
		OnConnect:             co.OnConnect,
		Protocol:              co.Protocol,
		Username:              co.Username,
		Password:              co.Password,
		CredentialsProvider:   co.CredentialsProvider,
		MaxRetries:            co.MaxRetries,
		MinRetryBackoff:       co.MinRetryBackoff,
		MaxRetryBackoff:       co.MaxRetryBackoff,
		DialTimeout:           co.DialTimeout,
		DialerRetries:         co.DialerRetries,
		ReadTimeout:           co.ReadTimeout,
		WriteTimeout:          co.WriteTimeout,
		ContextTimeoutEnabled: co.ContextTimeoutEnabled,
		PoolFIFO:              co.PoolFIFO,
		PoolSize:              co.PoolSize,
		PoolTimeout:           co.PoolTimeout,
		MinIdleConns:          co.MinIdleConns,
		MaxIdleConns:          co.MaxIdleConns,
		MaxActiveConns:        co.MaxActiveConns,
		ConnMaxIdleTime:       co.ConnMaxIdleTime,
		ConnMaxLifetime:       co.ConnMaxLifetime,
		TLSConfig:             co.TLSConfig,
		DisableIdentity:       co.DisableIdentity,
	}
}

// clusterReady is the probe of a Cluster master: it answers, and serves its
// slots. A master that restarts answers PING at once but CLUSTERDOWN for a
// while (until it has rejoined the Cluster); a PING would close its
// circuit too early.
func clusterReady(ctx context.Context, c *redis.Client) error {
	info, err := c.ClusterInfo(ctx).Result()
	if err != nil {
		return err
	}
	if !strings.Contains(info, "cluster_state:ok") {
		return errors.New("CLUSTERDOWN: the master is not serving (cluster_state is not ok)")
	}
	return nil
}

// isRedirect reports whether err is a reply saying the slot is served
// elsewhere (MOVED, ASK) or is moving (TRYAGAIN): the call did not run.
func isRedirect(err error) bool {
	if err == nil {
		return false
	}
	for _, p := range []string{"MOVED ", "ASK ", "TRYAGAIN"} {
		if strings.Contains(err.Error(), p) {
			return true
		}
	}
	return false
}

// keySlot is the Cluster hash slot of key: CRC16 of its hash tag (the part
// between the first '{' and the next '}', when not empty), else of the key.
func keySlot(key string) int {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			key = key[s+1 : s+1+e]
		}
	}
	return int(crc16(key) % clusterSlots)
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial 0), Redis Cluster's
// key hash.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc = crc<<8 ^ crc16Table[byte(crc>>8)^s[i]]
	}
	return crc
}

var crc16Table = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()
