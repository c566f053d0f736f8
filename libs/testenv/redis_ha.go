package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisCluster is a Redis Cluster on loopback: Masters[i] serves the i-th equal share of the
// 16384 slots, and Replicas[i] replicate it. A killed master's replica takes over after the
// cluster's node timeout (one second here).
type RedisCluster struct {
	Masters  []*Redis
	Replicas [][]*Redis
}

// Addrs are every node's host:port, as a client's seed list.
func (c *RedisCluster) Addrs() []string {
	var out []string
	for i, m := range c.Masters {
		out = append(out, m.Addr)
		for _, r := range c.Replicas[i] {
			out = append(out, r.Addr)
		}
	}
	return out
}

// Close stops every node.
func (c *RedisCluster) Close() {
	for i, m := range c.Masters {
		_ = m.Close()
		for _, r := range c.Replicas[i] {
			_ = r.Close()
		}
	}
}

func clusterNode(r *Redis) []string {
	return []string{"--port", strconv.Itoa(r.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", r.dir, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", "1000", "--cluster-replica-validity-factor", "0", "--cluster-port", strconv.Itoa(r.busPort)}
}

// StartRedisCluster starts masters x (1 + replicasEach) redis-server processes in cluster mode,
// assigns the slots, joins them and waits until every node reports cluster_state:ok and every
// replica is in sync.
func StartRedisCluster(masters, replicasEach int) (_ *RedisCluster, err error) {
	c := &RedisCluster{Replicas: make([][]*Redis, masters)}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	for i := 0; i < masters; i++ {
		m, err := startRedis(clusterNode)
		if err != nil {
			return nil, err
		}
		c.Masters = append(c.Masters, m)
		for j := 0; j < replicasEach; j++ {
			r, err := startRedis(clusterNode)
			if err != nil {
				return nil, err
			}
			c.Replicas[i] = append(c.Replicas[i], r)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	j := &clusterJoin{c: c, clients: map[string]*redis.Client{}}
	defer j.close()
	for _, step := range []func(context.Context) error{j.assignSlots, j.meet, j.replicate, j.awaitReady} {
		if err := step(ctx); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// clusterJoin makes a cluster of started nodes: slots, MEET, REPLICATE, then waits for it.
type clusterJoin struct {
	c       *RedisCluster
	clients map[string]*redis.Client
}

func (j *clusterJoin) cl(addr string) *redis.Client {
	if j.clients[addr] == nil {
		j.clients[addr] = redis.NewClient(&redis.Options{Addr: addr})
	}
	return j.clients[addr]
}

func (j *clusterJoin) close() {
	for _, cl := range j.clients {
		_ = cl.Close()
	}
}

// assignSlots splits the 16384 slots evenly among the masters.
func (j *clusterJoin) assignSlots(ctx context.Context) error {
	const slots = 16384
	masters := len(j.c.Masters)
	for i, m := range j.c.Masters {
		lo, hi := i*slots/masters, (i+1)*slots/masters-1
		if err := j.cl(m.Addr).Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
			return fmt.Errorf("assign slots %d-%d to %s: %w", lo, hi, m.Addr, err)
		}
	}
	return nil
}

// meet introduces every node to the first master, and waits until every node knows every other.
func (j *clusterJoin) meet(ctx context.Context) error {
	all := j.c.Addrs()
	bus := map[string]int{}
	for i, m := range j.c.Masters {
		bus[m.Addr] = m.busPort
		for _, r := range j.c.Replicas[i] {
			bus[r.Addr] = r.busPort
		}
	}
	first := j.c.Masters[0]
	for _, a := range all[1:] {
		host, port, _ := strings.Cut(a, ":")
		// With its bus port: each node's is its own (--cluster-port), not its port + 10000.
		if err := j.cl(first.Addr).Do(ctx, "CLUSTER", "MEET", host, port, bus[a]).Err(); err != nil {
			return fmt.Errorf("CLUSTER MEET %s: %w", a, err)
		}
	}
	return awaitRedis(ctx, "every node knows every other", func() error {
		for _, a := range all {
			nodes, err := j.cl(a).ClusterNodes(ctx).Result()
			if err != nil {
				return err
			}
			if n := strings.Count(strings.TrimSpace(nodes), "\n") + 1; n != len(all) {
				return fmt.Errorf("%s knows %d of %d nodes", a, n, len(all))
			}
		}
		return nil
	})
}

// replicate makes each master's replicas replicate it.
func (j *clusterJoin) replicate(ctx context.Context) error {
	for i, m := range j.c.Masters {
		id, err := j.cl(m.Addr).Do(ctx, "CLUSTER", "MYID").Text()
		if err != nil {
			return err
		}
		for _, r := range j.c.Replicas[i] {
			if err := j.cl(r.Addr).Do(ctx, "CLUSTER", "REPLICATE", id).Err(); err != nil {
				return fmt.Errorf("make %s a replica of %s: %w", r.Addr, m.Addr, err)
			}
		}
	}
	return nil
}

// awaitReady waits until every node says cluster_state:ok and every replica is in sync.
func (j *clusterJoin) awaitReady(ctx context.Context) error {
	return awaitRedis(ctx, "cluster ok and replicas in sync", func() error {
		for _, a := range j.c.Addrs() {
			info, err := j.cl(a).ClusterInfo(ctx).Result()
			if err != nil {
				return err
			}
			if !strings.Contains(info, "cluster_state:ok") {
				return fmt.Errorf("%s: cluster not ok yet", a)
			}
		}
		for i := range j.c.Masters {
			for _, r := range j.c.Replicas[i] {
				if err := replicaInSync(ctx, j.cl(r.Addr)); err != nil {
					return fmt.Errorf("%s: %w", r.Addr, err)
				}
			}
		}
		return nil
	})
}

// MasterOf returns the node now serving key's slot as master, as the first live node says.
func (c *RedisCluster) MasterOf(ctx context.Context, key string) (*Redis, error) {
	var err error
	for _, a := range c.Addrs() {
		cl := redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
		var slot int64
		var shards []redis.ClusterShard
		if slot, err = cl.ClusterKeySlot(ctx, key).Result(); err == nil {
			shards, err = cl.ClusterShards(ctx).Result()
		}
		_ = cl.Close()
		if err != nil {
			continue
		}
		for _, s := range shards {
			for _, r := range s.Slots {
				if slot < r.Start || slot > r.End {
					continue
				}
				for _, n := range s.Nodes {
					if n.Role == "master" && n.Health == "online" {
						if node := c.node(int(n.Port)); node != nil {
							return node, nil
						}
					}
				}
			}
		}
		return nil, fmt.Errorf("no live master of the cluster serves slot %d", slot)
	}
	return nil, fmt.Errorf("no node of the cluster answers: %w", err)
}

func (c *RedisCluster) node(port int) *Redis {
	for i, m := range c.Masters {
		for _, r := range append([]*Redis{m}, c.Replicas[i]...) {
			if r.port == port {
				return r
			}
		}
	}
	return nil
}

// RedisSentinel is a Sentinel group on loopback watching the master named Name: Data[0] starts as
// the master and the others replicate it; Sentinels (quorum 2) fail over half a second after the
// master stops answering.
type RedisSentinel struct {
	Name      string
	Data      []*Redis
	Sentinels []*Redis
}

// SentinelAddrs are the sentinels' host:port.
func (s *RedisSentinel) SentinelAddrs() []string {
	var out []string
	for _, r := range s.Sentinels {
		out = append(out, r.Addr)
	}
	return out
}

// Close stops every process.
func (s *RedisSentinel) Close() {
	for _, r := range append(append([]*Redis{}, s.Data...), s.Sentinels...) {
		_ = r.Close()
	}
}

// StartRedisSentinel starts a master, replicas replicas of it and sentinels sentinels, and waits
// until every sentinel sees the master, every replica and every other sentinel (so that a
// failover can be agreed).
func StartRedisSentinel(replicas, sentinels int) (_ *RedisSentinel, err error) {
	s := &RedisSentinel{Name: "agentplane"}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	master, err := StartRedis()
	if err != nil {
		return nil, err
	}
	s.Data = append(s.Data, master)
	for i := 0; i < replicas; i++ {
		r, err := startRedis(func(r *Redis) []string {
			return []string{"--port", strconv.Itoa(r.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
				"--dir", r.dir, "--replicaof", "127.0.0.1", strconv.Itoa(master.port)}
		})
		if err != nil {
			return nil, err
		}
		s.Data = append(s.Data, r)
	}
	for i := 0; i < sentinels; i++ {
		r, err := startRedis(func(r *Redis) []string {
			conf := filepath.Join(r.dir, "sentinel.conf")
			// Sentinel rewrites its file as it learns; a restart keeps what it knew.
			if _, err := os.Stat(conf); err != nil {
				_ = os.WriteFile(conf, []byte(fmt.Sprintf(`port %d
bind 127.0.0.1
dir %s
sentinel monitor %s 127.0.0.1 %d 2
sentinel down-after-milliseconds %[3]s 500
sentinel failover-timeout %[3]s 5000
sentinel parallel-syncs %[3]s 1
`, r.port, r.dir, s.Name, master.port)), 0o600)
			}
			return []string{conf, "--sentinel"}
		})
		if err != nil {
			return nil, err
		}
		s.Sentinels = append(s.Sentinels, r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := awaitRedis(ctx, "sentinels see the master, its replicas and each other", func() error {
		for _, sn := range s.Sentinels {
			sc := redis.NewSentinelClient(&redis.Options{Addr: sn.Addr})
			m, err := sc.Master(ctx, s.Name).Result()
			_ = sc.Close()
			if err != nil {
				return err
			}
			if m["num-slaves"] != strconv.Itoa(replicas) || m["num-other-sentinels"] != strconv.Itoa(sentinels-1) {
				return fmt.Errorf("sentinel %s sees %s replicas and %s other sentinels", sn.Addr, m["num-slaves"], m["num-other-sentinels"])
			}
		}
		for _, r := range s.Data[1:] {
			rc := redis.NewClient(&redis.Options{Addr: r.Addr})
			err := replicaInSync(ctx, rc)
			_ = rc.Close()
			if err != nil {
				return fmt.Errorf("%s: %w", r.Addr, err)
			}
		}
		return nil
	}); err != nil {
		return nil, err
	}
	return s, nil
}

// Master returns the data node the sentinels now name as master.
func (s *RedisSentinel) Master(ctx context.Context) (*Redis, error) {
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.Sentinels[0].Addr})
	defer sc.Close()
	addr, err := sc.GetMasterAddrByName(ctx, s.Name).Result()
	if err != nil {
		return nil, err
	}
	for _, r := range s.Data {
		if r.Addr == addr[0]+":"+addr[1] {
			return r, nil
		}
	}
	return nil, fmt.Errorf("the sentinels name %v as master, which is none of the data nodes", addr)
}

func replicaInSync(ctx context.Context, c *redis.Client) error {
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return err
	}
	if !strings.Contains(info, "role:slave") || !strings.Contains(info, "master_link_status:up") {
		return errors.New("not a replica in sync yet")
	}
	return nil
}

func awaitRedis(ctx context.Context, what string, cond func() error) error {
	var err error
	for {
		if err = cond(); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", what, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// StartRedisTLS starts a redis-server that speaks only TLS (certFile and keyFile, signed by the CA
// in caFile; clients are not asked for certificates) and, when password is set, requires it.
func StartRedisTLS(certFile, keyFile, caFile, password string) (*Redis, error) {
	r, err := startRedisWith(true, func(r *Redis) []string {
		args := []string{"--port", "0", "--tls-port", strconv.Itoa(r.port), "--bind", "127.0.0.1", "--save", "",
			"--appendonly", "no", "--dir", r.dir, "--tls-cert-file", certFile, "--tls-key-file", keyFile, "--tls-ca-cert-file", caFile,
			"--tls-auth-clients", "no"}
		if password != "" {
			args = append(args, "--requirepass", password)
		}
		return args
	})
	return r, err
}
