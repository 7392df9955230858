package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"time"

	"github.com/redis/go-redis/v9"
)

// The cluster's shared state in Redis (docs/operations.md lists the keys):
//
//	petrel:nodes            set of node ids ever registered (pruned when lost)
//	petrel:node:<id>        the node's record (JSON NodeInfo), expiring after node_ttl
//	petrel:room:<name>      hash identity -> node id of the room's participants
//	petrel:rooms            set of room names with participants somewhere
//	petrel:drain:<id>       present when an operator asked the node to drain
//	petrel:place:<room>     placement records, petrel:moves (pub/sub): replacestate.go
//
// A node's record is rewritten on every heartbeat with a TTL: a node that stops
// (crash, partition) disappears when the TTL runs out, which is how the others
// notice its loss. Nothing else needs to be cleaned up by the lost node itself.
const (
	keyNodes  = "petrel:nodes"
	keyRooms  = "petrel:rooms"
	prefNode  = "petrel:node:"
	prefRoom  = "petrel:room:"
	prefDrain = "petrel:drain:"
	// roomTTL bounds how long a room's record outlives its last writer.
	roomTTL = time.Minute
)

// Load is what a node reports about how busy it is.
type Load struct {
	CPU           float64 `json:"cpu"` // share of the machine's cores, 0..1
	PacketsPerSec float64 `json:"packetsPerSec"`
	EgressMbps    float64 `json:"egressMbps"` // media sent to subscribers and node links
	// MaxEgressMbps is the node's cluster.max_egress_mbps (0: none): over
	// it, the node is offered to new participants last, as over max_cpu.
	MaxEgressMbps float64 `json:"maxEgressMbps,omitempty"`
	Participants  int     `json:"participants"`
	Tracks        int     `json:"tracks"`
	Rooms         int     `json:"rooms"`
}

// Member is a participant recorded in the cluster state.
type Member struct {
	Identity string `json:"identity"`
	// Kind is "participant" for a client, "local" for one inside the server (a
	// camera session, a recorder).
	Kind string `json:"kind"`
}

// NodeInfo is one node's record.
type NodeInfo struct {
	ID  string `json:"id"`
	URL string `json:"url"` // HTTP base URL: signaling is URL + /v1/rtc
	// LinkURL is the HTTPS base URL of node requests with cluster.tls.
	LinkURL  string              `json:"link_url,omitempty"`
	Started  int64               `json:"started"` // unix ns: tells a restarted node from its predecessor
	Updated  int64               `json:"updated"` // unix ms of the last heartbeat
	Draining bool                `json:"draining"`
	Load     Load                `json:"load"`
	Rooms    map[string][]Member `json:"rooms,omitempty"`
	// RTT is the measured round trip to other nodes in milliseconds (over the
	// link when there is one, else an HTTP probe).
	RTT map[string]float64 `json:"rtt,omitempty"`
	// Links is the number of node links up.
	Links int `json:"links"`
}

// WSURL is the node's signaling URL.
func (n NodeInfo) WSURL() string { return wsURL(n.URL) }

// RedisOptions describe how to reach the cluster's Redis.
type RedisOptions struct {
	Addr     string
	Password string
	TLS      bool
	// CAFile is a PEM file of the CA that signed Redis's certificate (a
	// self-signed one included); empty: the system's roots.
	CAFile string
}

// Dial connects to Redis and checks that it answers.
func Dial(ctx context.Context, o RedisOptions) (*redis.Client, error) {
	opt := &redis.Options{Addr: o.Addr, Password: o.Password, DialTimeout: 3 * time.Second,
		ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second}
	if o.TLS || o.CAFile != "" {
		opt.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		if o.CAFile != "" {
			pem, err := os.ReadFile(o.CAFile)
			if err != nil {
				return nil, fmt.Errorf("redis TLS CA: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("redis TLS CA %s: no PEM certificate in it", o.CAFile)
			}
			opt.TLSConfig.RootCAs = pool
		}
	}
	c := redis.NewClient(opt)
	if err := c.Ping(ctx).Err(); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("redis %s: %w", o.Addr, err)
	}
	return c, nil
}

// Registry reads and writes the cluster state.
type Registry struct {
	rdb *redis.Client
	ttl time.Duration
}

// NewRegistry wraps a Redis client; ttl is how long a node record lives.
func NewRegistry(rdb *redis.Client, ttl time.Duration) *Registry {
	return &Registry{rdb: rdb, ttl: ttl}
}

// Heartbeat writes the node's record and its rooms' membership. prev is the
// membership written last time, so that those who left are removed.
func (r *Registry) Heartbeat(ctx context.Context, n NodeInfo, prev map[string][]Member) error {
	n.Updated = time.Now().UnixMilli()
	b, err := json.Marshal(n)
	if err != nil {
		return err
	}
	pipe := r.rdb.TxPipeline()
	pipe.Set(ctx, prefNode+n.ID, b, r.ttl)
	pipe.SAdd(ctx, keyNodes, n.ID)
	for room, members := range n.Rooms {
		vals := make([]any, 0, 2*len(members))
		for _, m := range members {
			vals = append(vals, m.Identity, n.ID)
		}
		if len(vals) > 0 {
			pipe.HSet(ctx, prefRoom+room, vals...)
			pipe.Expire(ctx, prefRoom+room, roomTTL)
			pipe.SAdd(ctx, keyRooms, room)
		}
	}
	for room, members := range prev {
		now := map[string]bool{}
		for _, m := range n.Rooms[room] {
			now[m.Identity] = true
		}
		for _, m := range members {
			if !now[m.Identity] {
				pipe.Eval(ctx, delIfOwner, []string{prefRoom + room}, m.Identity, n.ID)
			}
		}
	}
	_, err = pipe.Exec(ctx)
	return err
}

// delIfOwner removes a room member only if this node still holds it: the same
// identity may meanwhile have joined on another node (a drain, a reconnect).
const delIfOwner = `if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then return redis.call('HDEL', KEYS[1], ARGV[1]) end return 0`

// Leave removes the node's record at a clean shutdown (others need not wait
// for the TTL).
func (r *Registry) Leave(ctx context.Context, n NodeInfo) error {
	pipe := r.rdb.TxPipeline()
	pipe.Del(ctx, prefNode+n.ID, prefDrain+n.ID)
	pipe.SRem(ctx, keyNodes, n.ID)
	for room, members := range n.Rooms {
		for _, m := range members {
			pipe.Eval(ctx, delIfOwner, []string{prefRoom + room}, m.Identity, n.ID)
		}
	}
	_, err := pipe.Exec(ctx)
	return err
}

// Nodes returns the live nodes by id and the ids whose record expired (lost).
func (r *Registry) Nodes(ctx context.Context) (live []NodeInfo, lost []string, err error) {
	ids, err := r.rdb.SMembers(ctx, keyNodes).Result()
	if err != nil {
		return nil, nil, err
	}
	sort.Strings(ids)
	if len(ids) == 0 {
		return nil, nil, nil
	}
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = prefNode + id
	}
	vals, err := r.rdb.MGet(ctx, keys...).Result()
	if err != nil {
		return nil, nil, err
	}
	for i, v := range vals {
		s, ok := v.(string)
		if !ok {
			lost = append(lost, ids[i])
			continue
		}
		var n NodeInfo
		if err := json.Unmarshal([]byte(s), &n); err != nil || n.ID != ids[i] {
			// A record that does not parse is not a node to route to.
			lost = append(lost, ids[i])
			continue
		}
		live = append(live, n)
	}
	return live, lost, nil
}

// Forget removes a lost node: its id from the node set and its participants
// from the rooms. Any survivor may do it; it is idempotent.
func (r *Registry) Forget(ctx context.Context, id string) error {
	if err := r.rdb.SRem(ctx, keyNodes, id).Err(); err != nil {
		return err
	}
	rooms, err := r.rdb.SMembers(ctx, keyRooms).Result()
	if err != nil {
		return err
	}
	for _, room := range rooms {
		m, err := r.rdb.HGetAll(ctx, prefRoom+room).Result()
		if err != nil {
			return err
		}
		for ident, node := range m {
			if node == id {
				r.rdb.Eval(ctx, delIfOwner, []string{prefRoom + room}, ident, id)
			}
		}
		if n, _ := r.rdb.Exists(ctx, prefRoom+room).Result(); n == 0 {
			r.rdb.SRem(ctx, keyRooms, room)
		}
	}
	return r.rdb.Del(ctx, prefDrain+id).Err()
}

// Room returns the room's participants by identity with their node.
func (r *Registry) Room(ctx context.Context, room string) (map[string]string, error) {
	return r.rdb.HGetAll(ctx, prefRoom+room).Result()
}

// Rooms lists the rooms with participants somewhere in the cluster.
func (r *Registry) Rooms(ctx context.Context) ([]string, error) {
	rooms, err := r.rdb.SMembers(ctx, keyRooms).Result()
	sort.Strings(rooms)
	return rooms, err
}

// ErrNoNode: the node named has no live record.
var ErrNoNode = errors.New("no live node")

// Drain asks node id to move its participants elsewhere.
func (r *Registry) Drain(ctx context.Context, id string) error {
	n, err := r.rdb.Exists(ctx, prefNode+id).Result()
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("%w %q", ErrNoNode, id)
	}
	return r.rdb.Set(ctx, prefDrain+id, "1", 0).Err()
}

// Undrain withdraws a drain request: node id takes new participants again
// and keeps those it still has. A node that is gone has nothing to undo.
func (r *Registry) Undrain(ctx context.Context, id string) error {
	return r.rdb.Del(ctx, prefDrain+id).Err()
}

// DrainRequested reports whether an operator asked node id to drain.
func (r *Registry) DrainRequested(ctx context.Context, id string) (bool, error) {
	err := r.rdb.Get(ctx, prefDrain+id).Err()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	return err == nil, err
}
