package jobstatus

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/ringside/ringside/coordinator/record"
)

func printerSnapshots() (first, progressed, next Snapshot) {
	first = Snapshot{Job: "llama", Namespace: "default", Generation: 1, WorldSize: 1,
		Members: []Member{{ID: "w0", Addr: "10.0.0.10", Slots: 1, State: record.StateActive}}}
	progressed = first
	progressed.Members = []Member{first.Members[0]}
	progressed.Members[0].Step = 100
	next = progressed
	next.Generation = 2
	return first, progressed, next
}

func TestPrinterPrintsOnlyChangesWhenNotATerminal(t *testing.T) {
	var out bytes.Buffer
	p := NewPrinter(&out, false)
	first, progressed, next := printerSnapshots()
	for _, snap := range []Snapshot{first, progressed, progressed, next} {
		if err := p.Show(snap, nil); err != nil {
			t.Fatal(err)
		}
	}
	if got := strings.Count(out.String(), "job default/llama"); got != 2 {
		t.Fatalf("printed %d snapshots, want 2 (the first and the new generation):\n%s", got, out.String())
	}
	if strings.Contains(out.String(), "\x1b") {
		t.Errorf("output to a buffer has escape sequences:\n%q", out.String())
	}
}

func TestPrinterPrintsEverySnapshotAsJSON(t *testing.T) {
	var out bytes.Buffer
	p := NewPrinter(&out, true)
	first, progressed, _ := printerSnapshots()
	for _, snap := range []Snapshot{first, progressed} {
		if err := p.Show(snap, nil); err != nil {
			t.Fatal(err)
		}
	}
	// A failed read prints nothing: a script sees only snapshots.
	if err := p.Show(Snapshot{}, errors.New("etcd down")); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("printed %d lines, want 2:\n%s", len(lines), out.String())
	}
	var s Snapshot
	if err := json.Unmarshal([]byte(lines[1]), &s); err != nil || s.Members[0].Step != 100 {
		t.Errorf("second line %q: %v", lines[1], err)
	}
}

func TestPrinterOnce(t *testing.T) {
	first, _, _ := printerSnapshots()
	var table, asJSON bytes.Buffer
	if err := NewPrinter(&table, false).Once(first); err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	if err := Render(&want, first, RenderOptions{}); err != nil {
		t.Fatal(err)
	}
	if table.String() != want.String() {
		t.Errorf("Once printed\n%s\nwant Render's\n%s", table.String(), want.String())
	}
	if err := NewPrinter(&asJSON, true).Once(first); err != nil {
		t.Fatal(err)
	}
	if strings.Count(asJSON.String(), "\n") != 1 || !json.Valid(asJSON.Bytes()) {
		t.Errorf("Once --json printed %q, want one JSON line", asJSON.String())
	}
}
