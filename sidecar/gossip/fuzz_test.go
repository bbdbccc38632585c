package gossip

import (
	"bytes"
	"encoding/base64"
	"net"
	"testing"

	"github.com/hashicorp/memberlist"
)

// FuzzParseKeys reads any file as a gossip key file: nothing may panic,
// and what is accepted is a keyring of distinct AES keys.
func FuzzParseKeys(f *testing.F) {
	k32 := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 32))
	k16 := base64.RawStdEncoding.EncodeToString(bytes.Repeat([]byte{2}, 16))
	for _, seed := range []string{k32 + "\n", "# rotation\n" + k16 + "\n\n" + k32 + "\n", "0123456789abcdef", "", "not a key\n", k32 + "\n" + k32} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		keys, err := ParseKeys(data)
		if err != nil {
			if len(keys) > 0 {
				t.Fatal("keys with an error")
			}
			return
		}
		if len(keys) == 0 {
			t.Fatal("no keys and no error")
		}
		for i, k := range keys {
			if checkKeyLen(len(k)) != nil {
				t.Fatalf("key %d of %d bytes accepted", i, len(k))
			}
			for _, o := range keys[:i] {
				if bytes.Equal(k, o) {
					t.Fatal("a key repeated")
				}
			}
		}
	})
}

// discardEvents drops every verdict.
type discardEvents struct{}

func (discardEvents) MemberDead(string, net.IP) {}

// FuzzGossipMessage hands any application message to the delegate, as a
// member holding the key could gossip it: a leave notice of some member,
// or anything else. Nothing may panic; only a leave notice of a live member
// other than this one marks it leaving.
func FuzzGossipMessage(f *testing.F) {
	f.Add([]byte{leaveNoticeTag, 'w', '1'})
	f.Add([]byte{leaveNoticeTag})
	f.Add(append([]byte{leaveNoticeTag}, bytes.Repeat([]byte{'x'}, 300)...))
	f.Add([]byte{leaveNoticeTag, 'w', '/', '1'})
	f.Add([]byte{0, 1, 2})
	disp := newDispatcher(discardEvents{})
	f.Cleanup(disp.close)
	f.Fuzz(func(t *testing.T, msg []byte) {
		d := newDelegate("w0", 4, disp, nil)
		invalid := 0
		d.onInvalid = func() { invalid++ }
		for _, name := range []string{"w0", "w1", "w2"} {
			d.NotifyJoin(&memberlist.Node{Name: name, Addr: net.IPv4(127, 0, 0, 1), Port: 7946})
		}
		d.NotifyMsg(bytes.Clone(msg))
		d.mu.Lock()
		leaving := len(d.leaving)
		d.mu.Unlock()
		name, ok := decodeLeaveNotice(msg)
		wantLeaving := 0
		if ok && (name == "w1" || name == "w2") {
			wantLeaving = 1
		}
		if leaving != wantLeaving || (!ok && invalid != 1) {
			t.Fatalf("message %q: %d members leaving (want %d), %d counted invalid", msg, leaving, wantLeaving, invalid)
		}
		d.GetBroadcasts(0, 1400)
	})
}
