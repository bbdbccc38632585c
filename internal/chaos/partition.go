package chaos

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ringside/ringside/coordinator/record"
)

// A gossip partition cuts the gossip traffic (UDP, and the TCP memberlist
// falls back to) between two halves of the live workers, and nothing else:
// etcd and the trainers' connections still work. Every member still
// reaches etcd, so nobody is to be evicted and no generation committed:
// the checker counts any eviction as a live one. The cut is a chain of
// iptables rules matching each worker's loopback address and gossip port,
// so it touches no other traffic of the machine.

// canPartition says why partitions cannot be played here, or nil.
func canPartition() error {
	if os.Geteuid() != 0 {
		return errors.New("gossip partitions need root (iptables)")
	}
	if _, err := exec.LookPath("iptables"); err != nil {
		return errors.New("gossip partitions need iptables (apt-get install iptables)")
	}
	return nil
}

func iptables(args ...string) error {
	out, err := exec.Command("iptables", append([]string{"-w"}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("iptables %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// partition cuts gossip between two halves of the live workers for hold.
func (h *harness) partition(ctx context.Context, ev Event, hold time.Duration) (Fault, error) {
	f := Fault{Kind: Partition, At: time.Now()}
	ids := slices.Sorted(maps.Keys(h.live))
	start := int(ev.Pick % uint64(len(ids)))
	ids = append(ids[start:], ids[:start]...)
	half := len(ids) / 2
	sides := [2][]string{ids[:half], ids[half:]}
	f.Targets = slices.Clone(ids)

	resp, err := h.rec.client.Get(ctx, h.rec.prefix+record.MembersDir, clientv3.WithPrefix())
	if err != nil {
		return f, fmt.Errorf("partition: read members: %w", err)
	}
	gossip := map[string]string{}
	for _, kv := range resp.Kvs {
		if info, err := record.DecodeMember(string(kv.Key), kv.Value, kv.CreateRevision); err == nil {
			gossip[info.ID] = info.GossipAddr
		}
	}
	chain := fmt.Sprintf("RINGSIDE-CHAOS-%d", os.Getpid())
	if err := iptables("-N", chain); err != nil {
		return f, err
	}
	heal := func() {
		iptables("-D", "INPUT", "-j", chain) //nolint:errcheck // best effort: the chain goes next
		iptables("-F", chain)                //nolint:errcheck
		iptables("-X", chain)                //nolint:errcheck
	}
	cut := func() error {
		if err := iptables("-I", "INPUT", "-j", chain); err != nil {
			return err
		}
		for s := range 2 {
			for _, from := range sides[s] {
				for _, to := range sides[1-s] {
					host, port, err := net.SplitHostPort(gossip[to])
					if err != nil {
						continue // not registered right now: nothing to cut
					}
					for _, proto := range []string{"udp", "tcp"} {
						if err := iptables("-A", chain, "-p", proto, "-s", h.live[from].Addr, "-d", host, "--dport", port, "-j", "DROP"); err != nil {
							return err
						}
					}
				}
			}
		}
		return nil
	}
	if err := cut(); err != nil {
		heal()
		return f, err
	}
	fmt.Fprintf(h.progress, "gossip cut between %v and %v for %s\n", sides[0], sides[1], hold.Round(time.Millisecond))
	err = sleep(ctx, hold)
	heal()
	f.End = time.Now()
	if err != nil {
		return f, err
	}
	f.Resumed, _ = h.settle(ctx, f.At)
	return f, nil
}
