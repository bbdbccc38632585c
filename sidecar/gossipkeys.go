package sidecar

import (
	"bytes"
	"context"
	"time"

	"github.com/ringside/ringside/sidecar/gossip"
)

// ReloadGossipKeys has the key file read again now instead of at its next
// check (the command calls it on SIGHUP). It never blocks; without a key
// file it does nothing.
func (a *Agent) ReloadGossipKeys() {
	select {
	case a.reloadKeys <- struct{}{}:
	default:
	}
}

// watchGossipKeys applies the key file's keys whenever they differ from
// the keyring's, checking every GossipKeyCheck and on ReloadGossipKeys. A
// file that cannot be read or holds no valid key changes nothing: the
// keyring in use stays, and the failure is logged and counted, so a
// half-written Secret never cuts a member off.
func (a *Agent) watchGossipKeys(ctx context.Context) {
	tick := time.NewTicker(a.cfg.GossipKeyCheck)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-a.reloadKeys:
		}
		a.applyGossipKeys()
	}
}

func (a *Agent) applyGossipKeys() {
	keys, err := gossip.LoadKeys(a.cfg.GossipKeyFile)
	if err != nil {
		a.metrics.keyReloads.WithLabelValues("failed").Inc()
		a.log.Warn("gossip keys not reloaded; the keys in use stay", "err", err)
		return
	}
	if sameKeyring(keys, a.gossip.Keys()) {
		return
	}
	if err := a.gossip.SetKeys(keys); err != nil {
		a.metrics.keyReloads.WithLabelValues("failed").Inc()
		a.log.Warn("gossip keys not applied; the keys in use stay", "err", err)
		return
	}
	a.metrics.keyReloads.WithLabelValues("applied").Inc()
	a.log.Info("gossip keys applied", "keys", len(keys), "primary", gossip.Fingerprint(keys[0]))
}

// sameKeyring reports whether two keyrings encrypt with the same key and
// decrypt with the same set.
func sameKeyring(a, b [][]byte) bool {
	if len(a) != len(b) || len(a) == 0 || !bytes.Equal(a[0], b[0]) {
		return len(a) == 0 && len(b) == 0
	}
	for _, k := range a {
		found := false
		for _, o := range b {
			if bytes.Equal(k, o) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}
