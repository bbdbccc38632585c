package gossip

import (
	"log/slog"
	"net"
	"testing"
	"time"
)

// memberlist keeps packets after the read returns: each must own its bytes.
func TestTransportPacketsOwnTheirBytes(t *testing.T) {
	tr, err := listen("127.0.0.1", 0, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Shutdown()
	addr := (&net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: tr.port()}).String()
	for _, msg := range []string{"first packet", "second"} {
		if _, err := tr.WriteTo([]byte(msg), addr); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	var bufs [][]byte
	for range 2 {
		select {
		case p := <-tr.PacketCh():
			bufs = append(bufs, p.Buf)
			got = append(got, string(p.Buf))
		case <-time.After(5 * time.Second):
			t.Fatal("packet not received within 5s")
		}
	}
	if got[0] != "first packet" || got[1] != "second" || string(bufs[0]) != "first packet" {
		t.Fatalf("packets %q, first now %q: want each to keep its own bytes", got, bufs[0])
	}
	if cap(bufs[0]) > 64 {
		t.Fatalf("a 12-byte packet holds a %d-byte buffer", cap(bufs[0]))
	}
}

func TestTransportAdvertisesTheBoundPort(t *testing.T) {
	tr, err := listen("127.0.0.1", 0, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Shutdown()
	ip, port, err := tr.FinalAdvertiseAddr("127.0.0.1", 0)
	if err != nil || !ip.Equal(net.IPv4(127, 0, 0, 1)) || port != tr.port() {
		t.Fatalf("FinalAdvertiseAddr = %v, %d, %v; want 127.0.0.1, %d", ip, port, err, tr.port())
	}
	if _, _, err := tr.FinalAdvertiseAddr("not-an-ip", 0); err == nil {
		t.Fatal("a malformed advertise address was accepted")
	}
}
