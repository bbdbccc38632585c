package gossip

import (
	"bytes"
	"context"
	"crypto/rand"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/memberlist"
)

// jobLabel is what the sidecar stamps on its gossip: the job's namespace
// and name, which an attacker on the pod network can read off any packet.
const jobLabel = "ns/job"

func newTestKey(t testing.TB) []byte {
	t.Helper()
	key := make([]byte, KeySize)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	return key
}

// memberlist's message types and bodies, as its net.go has them: what a
// forger on the network would write.
const (
	mlSuspectMsg = 3
	mlDeadMsg    = 5
	mlUserMsg    = 8
	mlEncryptMsg = 10
)

type mlSuspect struct {
	Incarnation uint32
	Node        string
	From        string
}

type mlDead struct {
	Incarnation uint32
	Node        string
	From        string
}

// forge encodes one memberlist message, in plain text, with the job's label.
func forge(t testing.TB, msgType byte, body any) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := codec.NewEncoder(&buf, &codec.MsgpackHandle{}).Encode(body); err != nil {
		t.Fatal(err)
	}
	return forgeRaw(t, msgType, buf.Bytes())
}

// forgeRaw is a memberlist message of msgType carrying payload as it is.
func forgeRaw(t testing.TB, msgType byte, payload []byte) []byte {
	t.Helper()
	pkt, err := memberlist.AddLabelHeaderToPacket(append([]byte{msgType}, payload...), jobLabel)
	if err != nil {
		t.Fatal(err)
	}
	return pkt
}

func sendUDP(t testing.TB, to string, packets [][]byte) {
	t.Helper()
	conn, err := net.Dial("udp", to)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, p := range packets {
		if _, err := conn.Write(p); err != nil {
			t.Fatal(err)
		}
	}
}

// attackPackets is what a process on the network without the key sends
// about victim: a suspicion, a death with an incarnation the victim never
// reaches, a leave notice, and noise (some of it posing as encrypted).
func attackPackets(t testing.TB, victim string) [][]byte {
	t.Helper()
	noise := make([]byte, 512)
	rand.Read(noise)
	return [][]byte{
		forge(t, mlSuspectMsg, mlSuspect{Incarnation: 1 << 30, Node: victim, From: "attacker"}),
		forge(t, mlDeadMsg, mlDead{Incarnation: 1 << 30, Node: victim, From: "attacker"}),
		forgeRaw(t, mlUserMsg, newLeaveNotice(victim).msg),
		noise,
		append([]byte{mlEncryptMsg}, noise...),
	}
}

// quietFor is how long a test waits for a death that must not come: ten
// probe intervals, long past the half second a forged death takes to act
// (see TestForgedDeathKillsInPlainText).
const quietFor = 2 * time.Second

// TestForgedDeathKillsInPlainText is the control of the test below: in
// plain text, the same packets make the observer declare a live member
// dead. Without it, a forgery that memberlist merely failed to parse would
// pass for one the key stopped.
func TestForgedDeathKillsInPlainText(t *testing.T) {
	members := startCluster(t, 2, func(c *Config) { c.Label = jobLabel })
	observer, victim := members[0], members[1]
	sendUDP(t, observer.g.LocalAddr(), attackPackets(t, victim.name))
	// The forged death and leave notice make the victim dead, or gone if
	// the notice was taken first: either way the forgery worked.
	select {
	case got := <-observer.rec.dead:
		if got != victim.name {
			t.Fatalf("observer reported %s dead, want %s", got, victim.name)
		}
	case got := <-observer.rec.left:
		if got != victim.name {
			t.Fatalf("observer reported %s gone, want %s", got, victim.name)
		}
	case <-time.After(awaitTimeout):
		t.Fatal("the observer did not take the forged death in plain text")
	}
}

// TestForgedGossipWithoutTheKeyChangesNothing plays an attacker on the pod
// network against an encrypted job: raw packets (suspect, dead, a leave
// notice, noise) and a memberlist of its own, without the key and then
// with a wrong one, that tries to join and gossip. Nobody is reported dead
// or gone, nobody new joins, and the members still answer each other.
func TestForgedGossipWithoutTheKeyChangesNothing(t *testing.T) {
	key := newTestKey(t)
	members := startCluster(t, 3, func(c *Config) { c.Label, c.Keys = jobLabel, [][]byte{key} })
	observer, victim := members[0], members[1]

	for _, m := range members {
		sendUDP(t, m.g.LocalAddr(), attackPackets(t, victim.name))
		sendUDP(t, m.g.LocalAddr(), attackPackets(t, m.name))
	}
	for _, attackerKeys := range [][][]byte{nil, {newTestKey(t)}} {
		cfg := testConfig("attacker")
		cfg.Label, cfg.Keys = jobLabel, attackerKeys
		attacker := startMember(t, cfg)
		ctx, cancel := context.WithTimeout(context.Background(), awaitTimeout)
		n, err := attacker.g.Join(ctx, []string{observer.g.LocalAddr(), victim.g.LocalAddr()})
		cancel()
		if err == nil || n != 0 {
			t.Fatalf("attacker with %d keys joined %d members (err %v), want none", len(attackerKeys), n, err)
		}
		// A member it never joined it can still ping and gossip at.
		if st, _ := attacker.g.Check(context.Background(), victim.name); st == Answered {
			t.Fatal("the attacker's ping got an answer")
		}
	}

	quiet := time.After(quietFor)
	for done := false; !done; {
		select {
		case <-quiet:
			done = true
		case name := <-observer.rec.dead:
			t.Fatalf("observer reported %s dead after forged gossip", name)
		case name := <-observer.rec.left:
			t.Fatalf("observer reported %s gone after forged gossip", name)
		case name := <-observer.rec.joined:
			t.Fatalf("observer saw %s join", name)
		}
	}
	for _, m := range members {
		if got := m.g.Members(); got != len(members) {
			t.Errorf("%s counts %d members, want %d", m.name, got, len(members))
		}
		for _, peer := range members {
			if peer == m {
				continue
			}
			if st, err := m.g.Check(context.Background(), peer.name); st != Answered {
				t.Errorf("%s cannot reach %s after the attack: %v", m.name, peer.name, err)
			}
		}
		for _, ch := range []chan string{m.rec.dead, m.rec.left} {
			if got := pending(ch); len(got) > 0 {
				t.Errorf("%s reported %v", m.name, got)
			}
		}
	}
}

// TestKeyRotationKeepsEveryMember rotates a running job from one key to
// another in SetKeys' three rounds, one member at a time within each: after
// every change every member still reaches every other, nobody is reported
// dead or gone, and at the end a member with only the old key is refused
// while one with only the new key joins.
func TestKeyRotationKeepsEveryMember(t *testing.T) {
	oldKey, newKey := newTestKey(t), newTestKey(t)
	members := startCluster(t, 3, func(c *Config) { c.Label, c.Keys = jobLabel, [][]byte{oldKey} })
	allReach := func(step string) {
		t.Helper()
		for _, m := range members {
			for _, peer := range members {
				if peer == m {
					continue
				}
				if st, err := m.g.Check(context.Background(), peer.name); st != Answered {
					t.Fatalf("%s: %s cannot reach %s: %v", step, m.name, peer.name, err)
				}
			}
		}
	}
	for _, round := range []struct {
		name string
		keys [][]byte
	}{
		{"install the new key", [][]byte{oldKey, newKey}},
		{"use the new key", [][]byte{newKey, oldKey}},
		{"remove the old key", [][]byte{newKey}},
	} {
		for _, m := range members {
			if err := m.g.SetKeys(round.keys); err != nil {
				t.Fatalf("%s: %s: %v", round.name, m.name, err)
			}
			allReach(round.name + " on " + m.name)
		}
	}
	for _, m := range members {
		if keys := m.g.Keys(); len(keys) != 1 || !bytes.Equal(keys[0], newKey) {
			t.Fatalf("%s holds %d keys after the rotation, want the new one only", m.name, len(keys))
		}
		for _, ch := range []chan string{m.rec.dead, m.rec.left} {
			if got := pending(ch); len(got) > 0 {
				t.Errorf("%s reported %v during the rotation", m.name, got)
			}
		}
	}
	for _, tc := range []struct {
		key  []byte
		join bool
	}{{oldKey, false}, {newKey, true}} {
		cfg := testConfig("late")
		cfg.Label, cfg.Keys = jobLabel, [][]byte{tc.key}
		late := startMember(t, cfg)
		ctx, cancel := context.WithTimeout(context.Background(), awaitTimeout)
		n, err := late.g.Join(ctx, []string{members[0].g.LocalAddr()})
		cancel()
		if got := err == nil && n == 1; got != tc.join {
			t.Fatalf("a member with the %s key joined: %v (n %d, err %v)", map[bool]string{true: "new", false: "old"}[tc.join], got, n, err)
		}
		late.g.Close()
	}
}

func TestSetKeysRefusesWhatCannotWork(t *testing.T) {
	plain := startMember(t, testConfig("plain"))
	if err := plain.g.SetKeys([][]byte{newTestKey(t)}); err == nil {
		t.Fatal("a plain-text member took a key")
	}
	keyed := testConfig("keyed")
	keyed.Keys = [][]byte{newTestKey(t)}
	m := startMember(t, keyed)
	for _, keys := range [][][]byte{nil, {[]byte("short")}} {
		if err := m.g.SetKeys(keys); err == nil {
			t.Fatalf("SetKeys(%d keys) accepted", len(keys))
		}
	}
	if keys := m.g.Keys(); len(keys) != 1 || !bytes.Equal(keys[0], keyed.Keys[0]) {
		t.Fatal("a refused SetKeys changed the keyring")
	}
}
