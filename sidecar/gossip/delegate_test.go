package gossip

import (
	"net"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

func TestDisappearanceIsALeaveOnlyAfterAFreshNotice(t *testing.T) {
	x := &memberlist.Node{Name: "x", Addr: net.IPv4(10, 0, 0, 2), Port: 7946}
	tests := []struct {
		name   string
		notice bool
		age    time.Duration // of the notice when x disappears
		want   eventKind
	}{
		{name: "without a notice it is a death", want: memberDead},
		{name: "after a notice it is a departure", notice: true, want: memberLeft},
		{name: "after a stale notice it is a death", notice: true, age: leaveNoticeTTL, want: memberDead},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := newRecorder()
			disp := newDispatcher(rec)
			defer disp.close()
			d := newDelegate("self", 4, disp, nil)
			now := time.Unix(1000, 0)
			d.now = func() time.Time { return now }

			d.NotifyJoin(x)
			await(t, rec.joined, "x joins")
			if tt.notice {
				d.NotifyMsg(newLeaveNotice("x").Message())
				if d.queue.NumQueued() != 1 {
					t.Errorf("a fresh notice was not passed on")
				}
			}
			now = now.Add(tt.age)
			d.NotifyLeave(x)

			got := memberDead
			select {
			case <-rec.dead:
			case <-rec.left:
				got = memberLeft
			case <-time.After(awaitTimeout):
				t.Fatal("no event")
			}
			if got != tt.want {
				t.Fatalf("got event kind %d, want %d", got, tt.want)
			}
		})
	}
}

func TestNoticesAboutUnknownOrSelfAreIgnored(t *testing.T) {
	disp := newDispatcher(newRecorder())
	defer disp.close()
	d := newDelegate("self", 4, disp, nil)
	d.NotifyJoin(&memberlist.Node{Name: "self"})
	for _, msg := range [][]byte{
		newLeaveNotice("stranger").Message(),
		newLeaveNotice("self").Message(),
		{leaveNoticeTag},
		{42, 'x'},
	} {
		d.NotifyMsg(msg)
	}
	if n := d.queue.NumQueued(); n != 0 {
		t.Fatalf("%d notices passed on, want none", n)
	}
	if len(d.leaving) != 0 {
		t.Fatalf("recorded leavers %v", d.leaving)
	}
}
