package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// DefaultMasterName is the name under which the sentinels monitor the
	// master started by StartSentinel.
	DefaultMasterName = "mymaster"

	// Sentinel tuning. down-after is low so that fault tests (killing the
	// master) fail over in a few seconds; failover-timeout bounds a stuck
	// failover and the pause between automatic attempts (2x).
	sentinelDownAfterMs       = 1000
	sentinelFailoverTimeoutMs = 3000
	sentinelQuorum            = 2
	numSentinels              = 3

	sentinelSetupTimeout = 15 * time.Second
	failoverWaitTimeout  = 20 * time.Second
)

// Sentinel is a Sentinel-managed deployment started by StartSentinel: one
// master, one replica and three sentinels, all on 127.0.0.1. Failover and
// WaitForNewMaster update Master and Replica, so do not read those fields
// from other goroutines while they run.
type Sentinel struct {
	// MasterName is the monitored master's name (DefaultMasterName).
	MasterName string
	// Master and Replica are the data nodes. Failover and WaitForNewMaster
	// swap them so that Master is the current master; an automatic failover
	// the test does not wait for through WaitForNewMaster is not reflected.
	Master, Replica *Server
	// Sentinels are the three redis-server --sentinel processes (quorum 2,
	// down-after-milliseconds 1000, failover-timeout 3000).
	Sentinels []*Server
}

// StartSentinel starts a master, a replica of it (replicaof) and three
// sentinels monitoring it, and waits until the replica is in sync and every
// sentinel sees the master, the replica (link ok) and the two other
// sentinels. Extra arguments (command-line syntax, see StartServer) apply to
// the master and the replica, not to the sentinels. Takes about 2-3 s, most
// of it waiting for the sentinels' hello messages (sent every 2 s).
func StartSentinel(t testing.TB, args ...string) *Sentinel {
	t.Helper()
	bin, major := binary(t)
	extra, err := argsToConf(args)
	if err != nil {
		t.Fatalf("%v", err)
	}
	s := &Sentinel{MasterName: DefaultMasterName}
	start := func(kind serverKind, lines []string) *Server {
		t.Helper()
		srv, err := newServer(t, bin, major, kind, lines)
		if err == nil {
			err = srv.awaitStart(time.Now().Add(startTimeout), true)
		}
		if err != nil {
			startFailed(t, err)
		}
		return srv
	}
	s.Master = start(kindPlain, extra)
	replicaConf := append(append([]string(nil), extra...), fmt.Sprintf("replicaof 127.0.0.1 %d", s.Master.Port))
	s.Replica = start(kindPlain, replicaConf)

	ctx, cancel := context.WithTimeout(context.Background(), sentinelSetupTimeout)
	defer cancel()
	// Sentinels are started only once the replica is attached, so that their
	// very first INFO to the master already lists it (otherwise they would
	// only learn about it 10 s later).
	if err := poll(ctx, func() error { return replicaInSync(ctx, s.Master, s.Replica) }); err != nil {
		t.Fatalf("redistest: replica did not sync within %v: %v%s%s", sentinelSetupTimeout, err, s.Master.tail(), s.Replica.tail())
	}

	monitor := []string{
		fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d %d", s.MasterName, s.Master.Port, sentinelQuorum),
		fmt.Sprintf("sentinel down-after-milliseconds %s %d", s.MasterName, sentinelDownAfterMs),
		fmt.Sprintf("sentinel failover-timeout %s %d", s.MasterName, sentinelFailoverTimeoutMs),
		fmt.Sprintf("sentinel parallel-syncs %s 1", s.MasterName),
	}
	for range numSentinels {
		srv, err := newServer(t, bin, major, kindSentinel, monitor)
		if err != nil {
			startFailed(t, err)
		}
		s.Sentinels = append(s.Sentinels, srv)
	}
	deadline := time.Now().Add(startTimeout)
	for _, srv := range s.Sentinels {
		if err := srv.awaitStart(deadline, true); err != nil {
			startFailed(t, err)
		}
	}
	if err := poll(ctx, func() error { return s.sentinelsReady(ctx) }); err != nil {
		t.Fatalf("redistest: sentinels not ready within %v: %v%s", sentinelSetupTimeout, err, s.tails())
	}
	return s
}

// permanent marks an error that poll must not retry.
type permanent struct{ error }

func (p permanent) Unwrap() error { return p.error }

// poll calls f every 20 ms until it returns nil or a permanent error, or ctx
// ends; then it returns f's last error that was not merely caused by ctx
// ending, as that one explains what was being waited for.
func poll(ctx context.Context, f func() error) error {
	var last error
	for {
		err := f()
		var perm permanent
		if err == nil || errors.As(err, &perm) {
			return err
		}
		if ctx.Err() == nil || last == nil {
			last = err
		}
		select {
		case <-ctx.Done():
			return last
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// replicaInSync reports whether replica is an online, linked replica of master.
func replicaInSync(ctx context.Context, master, replica *Server) error {
	r, err := info(ctx, replica.Addr, "replication")
	if err != nil {
		return fmt.Errorf("%s: %w", replica.Addr, err)
	}
	if r["role"] != "slave" || r["master_port"] != strconv.Itoa(master.Port) || r["master_link_status"] != "up" {
		return fmt.Errorf("%s: role=%s master_port=%s master_link_status=%s", replica.Addr, r["role"], r["master_port"], r["master_link_status"])
	}
	m, err := info(ctx, master.Addr, "replication")
	if err != nil {
		return fmt.Errorf("%s: %w", master.Addr, err)
	}
	for k, v := range m {
		if strings.HasPrefix(k, "slave") && strings.Contains(v, "port="+strconv.Itoa(replica.Port)+",") {
			if strings.Contains(v, "state=online") {
				return nil
			}
			return fmt.Errorf("%s: %s:%s", master.Addr, k, v)
		}
	}
	return fmt.Errorf("%s does not list replica %s yet", master.Addr, replica.Addr)
}

// running returns the sentinels whose process is up.
func (s *Sentinel) running() []*Server {
	var out []*Server
	for _, srv := range s.Sentinels {
		if srv.Pid() != 0 {
			out = append(out, srv)
		}
	}
	return out
}

// sentinelsReady checks every running sentinel's view of the deployment.
func (s *Sentinel) sentinelsReady(ctx context.Context) error {
	up := s.running()
	for _, sen := range up {
		v, err := command(ctx, sen.Addr, "SENTINEL", "MASTER", s.MasterName)
		if err != nil {
			return fmt.Errorf("sentinel %s: SENTINEL MASTER: %w", sen.Addr, err)
		}
		m := flatMap(v)
		if addr := net.JoinHostPort(m["ip"], m["port"]); addr != s.Master.Addr || m["flags"] != "master" ||
			m["num-other-sentinels"] != strconv.Itoa(len(up)-1) {
			return fmt.Errorf("sentinel %s: master %s flags=%s num-other-sentinels=%s (want %s master %d)",
				sen.Addr, addr, m["flags"], m["num-other-sentinels"], s.Master.Addr, len(up)-1)
		}
		v, err = command(ctx, sen.Addr, "SENTINEL", "REPLICAS", s.MasterName)
		if err != nil {
			return fmt.Errorf("sentinel %s: SENTINEL REPLICAS: %w", sen.Addr, err)
		}
		found := false
		arr, _ := v.([]any)
		for _, e := range arr {
			r := flatMap(e)
			if net.JoinHostPort(r["ip"], r["port"]) == s.Replica.Addr && r["flags"] == "slave" && r["master-link-status"] == "ok" {
				found = true
			}
		}
		if !found {
			return fmt.Errorf("sentinel %s does not see replica %s as a healthy replica yet", sen.Addr, s.Replica.Addr)
		}
	}
	return nil
}

func (s *Sentinel) tails() string {
	var b strings.Builder
	b.WriteString(s.Master.tail())
	b.WriteString(s.Replica.tail())
	for _, srv := range s.Sentinels {
		b.WriteString(srv.tail())
	}
	return b.String()
}

// Addrs returns the sentinels' addresses.
func (s *Sentinel) Addrs() []string {
	addrs := make([]string, len(s.Sentinels))
	for i, srv := range s.Sentinels {
		addrs[i] = srv.Addr
	}
	return addrs
}

// Client returns a go-redis failover client (redis.NewFailoverClient) for the
// monitored master, closed on test cleanup. Options may adjust the
// redis.FailoverOptions.
func (s *Sentinel) Client(t testing.TB, opts ...func(*redis.FailoverOptions)) *redis.Client {
	t.Helper()
	o := &redis.FailoverOptions{MasterName: s.MasterName, SentinelAddrs: s.Addrs()}
	for _, f := range opts {
		f(o)
	}
	c := redis.NewFailoverClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// CurrentMaster returns the master address ("127.0.0.1:port") reported by
// the first sentinel that answers SENTINEL GET-MASTER-ADDR-BY-NAME.
func (s *Sentinel) CurrentMaster(ctx context.Context) (string, error) {
	var errs []error
	for _, sen := range s.Sentinels {
		addr, err := masterAddrFrom(ctx, sen.Addr, s.MasterName)
		if err == nil {
			return addr, nil
		}
		errs = append(errs, fmt.Errorf("sentinel %s: %w", sen.Addr, err))
	}
	return "", fmt.Errorf("no sentinel answered: %w", errors.Join(errs...))
}

func masterAddrFrom(ctx context.Context, sentinel, name string) (string, error) {
	v, err := command(ctx, sentinel, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", name)
	if err != nil {
		return "", err
	}
	arr, _ := v.([]any)
	if len(arr) != 2 {
		return "", fmt.Errorf("unexpected reply %v", v)
	}
	ip, _ := arr[0].(string)
	port, _ := arr[1].(string)
	return net.JoinHostPort(ip, port), nil
}

// agreedMaster returns the master address if all running sentinels agree.
func (s *Sentinel) agreedMaster(ctx context.Context) (string, error) {
	up := s.running()
	if len(up) == 0 {
		return "", errors.New("no sentinel is running")
	}
	var addr string
	for _, sen := range up {
		a, err := masterAddrFrom(ctx, sen.Addr, s.MasterName)
		if err != nil {
			return "", fmt.Errorf("sentinel %s: %w", sen.Addr, err)
		}
		if addr != "" && a != addr {
			return "", fmt.Errorf("sentinels disagree: %s vs %s", addr, a)
		}
		addr = a
	}
	return addr, nil
}

// Failover forces a failover with SENTINEL FAILOVER (the master does not
// need to be down) and waits until every running sentinel reports the
// replica as the new master and it accepts writes. The old master, if still
// running, is then made a replica of the new one right away (REPLICAOF +
// CONFIG REWRITE; left alone, Sentinel converts it only ~10 s after the
// switch, a window in which both accept writes) and Master/Replica are
// swapped. Takes about 1-2 s (up to ~4 s on a loaded machine); fails the test
// after 20 s.
func (s *Sentinel) Failover(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), failoverWaitTimeout)
	defer cancel()
	old, err := s.agreedMaster(ctx)
	if err != nil {
		t.Fatalf("redistest: Failover: %v", err)
	}
	err = poll(ctx, func() error {
		var errs []error
		for _, sen := range s.running() {
			_, err := command(ctx, sen.Addr, "SENTINEL", "FAILOVER", s.MasterName)
			switch {
			case err == nil:
				return nil
			case isRespError(err, "INPROG"), isRespError(err, "NOGOODSLAVE"):
				return err // transient: retry shortly
			case isRespError(err, ""):
				return permanent{fmt.Errorf("sentinel %s: %w", sen.Addr, err)}
			}
			// Connection problem: try the next sentinel.
			errs = append(errs, fmt.Errorf("sentinel %s: %w", sen.Addr, err))
		}
		return errors.Join(errs...)
	})
	if err != nil {
		t.Fatalf("redistest: SENTINEL FAILOVER %s: %v%s", s.MasterName, err, s.tails())
	}
	if _, err := s.awaitNewMaster(ctx, old); err != nil {
		t.Fatalf("redistest: failover from %s did not complete within %v: %v%s", old, failoverWaitTimeout, err, s.tails())
	}
}

// WaitForNewMaster waits (up to 20 s) until every running sentinel reports a
// master other than old that accepts writes, for example after the test
// killed the master (detection takes down-after-milliseconds = 1 s, the
// whole automatic failover typically 2-3 s). It then demotes old as Failover
// does if it is still running; if it is not, it appends a replicaof line to
// its config so that a later Restart brings it back as a replica of the new
// master (instead of as a second writable master until Sentinel converts it
// ~10 s later). Finally it swaps Master/Replica and returns the new master's
// address.
func (s *Sentinel) WaitForNewMaster(t testing.TB, old string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), failoverWaitTimeout)
	defer cancel()
	addr, err := s.awaitNewMaster(ctx, old)
	if err != nil {
		t.Fatalf("redistest: no new master (old %s) within %v: %v%s", old, failoverWaitTimeout, err, s.tails())
	}
	return addr
}

func (s *Sentinel) awaitNewMaster(ctx context.Context, old string) (string, error) {
	var addr string
	err := poll(ctx, func() error {
		a, err := s.agreedMaster(ctx)
		if err != nil {
			return err
		}
		if a == old {
			return fmt.Errorf("sentinels still report %s", old)
		}
		if err := writableMaster(ctx, a); err != nil {
			return err
		}
		addr = a
		return nil
	})
	if err != nil {
		return "", err
	}
	newSrv, oldSrv := s.byAddr(addr), s.byAddr(old)
	if newSrv == nil {
		return "", fmt.Errorf("sentinels promoted unknown instance %s", addr)
	}
	switch {
	case oldSrv == nil || oldSrv == newSrv:
	case oldSrv.Pid() != 0:
		if err := demote(ctx, oldSrv, newSrv); err != nil {
			return "", err
		}
		if err := poll(ctx, func() error { return replicaInSync(ctx, newSrv, oldSrv) }); err != nil {
			return "", fmt.Errorf("old master did not resync: %w", err)
		}
	default:
		// Dead: make a later Restart bring it back as a replica.
		if err := oldSrv.appendConf(fmt.Sprintf("replicaof 127.0.0.1 %d", newSrv.Port)); err != nil {
			return "", err
		}
	}
	other := s.Master
	if other == newSrv {
		other = s.Replica
	}
	s.Master, s.Replica = newSrv, other
	return addr, nil
}

// writableMaster checks that addr is a master accepting write commands. DEL
// of a missing key is a write command (replicas answer READONLY) with no
// effect on the dataset.
func writableMaster(ctx context.Context, addr string) error {
	m, err := info(ctx, addr, "replication")
	if err != nil {
		return fmt.Errorf("%s: %w", addr, err)
	}
	if m["role"] != "master" {
		return fmt.Errorf("%s: role=%s", addr, m["role"])
	}
	if _, err := command(ctx, addr, "DEL", "redistest:write-probe:absent"); err != nil {
		return fmt.Errorf("%s does not accept writes yet: %w", addr, err)
	}
	return nil
}

// demote makes old a replica of master unless it already is one.
func demote(ctx context.Context, old, master *Server) error {
	m, err := info(ctx, old.Addr, "replication")
	if err != nil {
		return fmt.Errorf("demote %s: %w", old.Addr, err)
	}
	if m["role"] == "slave" && m["master_port"] == strconv.Itoa(master.Port) {
		return nil
	}
	if _, err := command(ctx, old.Addr, "REPLICAOF", "127.0.0.1", strconv.Itoa(master.Port)); err != nil {
		return fmt.Errorf("demote %s: REPLICAOF: %w", old.Addr, err)
	}
	if _, err := command(ctx, old.Addr, "CONFIG", "REWRITE"); err != nil {
		return fmt.Errorf("demote %s: CONFIG REWRITE: %w", old.Addr, err)
	}
	return nil
}

func (s *Sentinel) byAddr(addr string) *Server {
	for _, srv := range []*Server{s.Master, s.Replica} {
		if srv != nil && srv.Addr == addr {
			return srv
		}
	}
	return nil
}
