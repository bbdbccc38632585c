package gossip

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

func TestMemberlistLinesBecomeSlogRecords(t *testing.T) {
	tests := []struct {
		name      string
		line      string
		wantLevel slog.Level
		wantMsg   string
	}{
		{"a debug line stays debug", "[DEBUG] memberlist: Stream connection from=127.0.0.1:1", slog.LevelDebug, "Stream connection from=127.0.0.1:1"},
		{"an info line stays info", "[INFO] memberlist: Marking m1 as failed, suspect timeout reached (0 peer confirmations)", slog.LevelInfo, "Marking m1 as failed, suspect timeout reached (0 peer confirmations)"},
		{"a warning stays a warning", "[WARN] memberlist: Refuting a suspect message (from: m2)", slog.LevelWarn, "Refuting a suspect message (from: m2)"},
		{"an error about a peer is a warning", "[ERR] memberlist: Push/Pull with m3 failed: EOF", slog.LevelWarn, "Push/Pull with m3 failed: EOF"},
		{"a failure every death produces is debug", "[ERR] memberlist: Failed fallback TCP ping: io: read/write on closed pipe", slog.LevelDebug, "Failed fallback TCP ping: io: read/write on closed pipe"},
		{"gossip to a dead member is debug", "[ERR] memberlist: Failed to send gossip to 10.0.0.1:7946: refused", slog.LevelDebug, "Failed to send gossip to 10.0.0.1:7946: refused"},
		{"a line without a level is a warning", "Err: Could not set the deadline: x", slog.LevelWarn, "Err: Could not set the deadline: x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			level, msg := parseLogLine(tt.line)
			if level != tt.wantLevel || msg != tt.wantMsg {
				t.Fatalf("parseLogLine(%q) = %v, %q; want %v, %q", tt.line, level, msg, tt.wantLevel, tt.wantMsg)
			}
		})
	}
}

func TestLogAdapterWritesAtTheLevelAndSpotsSuspicions(t *testing.T) {
	var out bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelInfo}))
	var suspected []string
	l := newLogAdapter(logger, func(name string) { suspected = append(suspected, name) })

	l.Printf("[DEBUG] memberlist: Failed UDP ping: m7 (timeout reached)")
	l.Printf("[INFO] memberlist: Suspect m7 has failed, no acks received")

	got := out.String()
	if strings.Contains(got, "Failed UDP ping") {
		t.Errorf("a debug line was written at info level:\n%s", got)
	}
	if !strings.Contains(got, "level=INFO") || !strings.Contains(got, `msg="Suspect m7 has failed, no acks received"`) ||
		!strings.Contains(got, "component=memberlist") {
		t.Errorf("the suspicion line is not an info record of component memberlist:\n%s", got)
	}
	if len(suspected) != 1 || suspected[0] != "m7" {
		t.Errorf("suspected %v, want [m7]", suspected)
	}
}

// memberlist writes a line for every message it drops when its handler
// queue is full; a storm of them is written once per overloadEvery, with
// their number.
func TestOverloadLinesAreWrittenOncePerInterval(t *testing.T) {
	var out bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelInfo}))
	l := newLogAdapter(logger, nil)
	for range 100 {
		l.Print("[WARN] memberlist: handler queue full, dropping message (3) from=127.0.0.1:7946")
	}
	l.Print("[WARN] memberlist: Refuting a suspect message (from: m2)")
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "handler queue full") || !strings.Contains(lines[0], "lines=1") || !strings.Contains(lines[1], "Refuting") {
		t.Fatalf("100 overload lines and another were written as %q; want the first overload line (lines=1) and the other", lines)
	}
}
