package launch

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/ringside/ringside/coordinator/record"
)

func TestLineTailPassesEverythingThroughAndKeepsTheLastLines(t *testing.T) {
	var out bytes.Buffer
	tail := &lineTail{out: &out}
	var in strings.Builder
	for i := range 30 {
		fmt.Fprintf(&in, "line %d\n", i)
	}
	in.WriteString("progress 10%\rprogress 100%\r\nCRLF line\r\n")
	in.WriteString(strings.Repeat("x", 2*record.MaxCrashLineLen) + "\n")
	in.WriteString("EOFError: Ran out of input") // no newline: the process died
	// Written in pieces, as a pipe delivers it.
	b := []byte(in.String())
	for len(b) > 0 {
		n := min(7, len(b))
		tail.Write(b[:n])
		b = b[n:]
	}
	if out.String() != in.String() {
		t.Fatal("the output was changed on its way through")
	}
	got := tail.lines()
	if len(got) != record.MaxCrashLines {
		t.Fatalf("%d lines kept, want %d: %q", len(got), record.MaxCrashLines, got)
	}
	want := []string{"progress 100%", "CRLF line", strings.Repeat("x", record.MaxCrashLineLen-len("…")) + "…", "EOFError: Ran out of input"}
	if !slices.Equal(got[len(got)-4:], want) {
		t.Fatalf("last lines %q, want %q", got[len(got)-4:], want)
	}
	if got[0] != "line 14" {
		t.Fatalf("first line kept %q, want line 14", got[0])
	}
}
