package gossip

import (
	"context"
	"log"
	"log/slog"
	"strings"
	"time"
)

// newLogAdapter returns the *log.Logger memberlist insists on, turning each of
// its "[LEVEL] memberlist: text" lines into an slog record of the matching
// level with component=memberlist. onSuspect, if not nil, is called with the
// member named by each "Failed UDP ping: NAME" line: the only place
// memberlist reveals that its own probe found a member unresponsive.
func newLogAdapter(logger *slog.Logger, onSuspect func(name string)) *log.Logger {
	return log.New(&logWriter{logger: logger, onSuspect: onSuspect}, "", 0)
}

// logWriter receives one memberlist line per Write (log.Logger guarantees it
// and serialises the calls).
type logWriter struct {
	logger    *slog.Logger
	onSuspect func(name string)

	dropped       int       // overload lines seen since droppedLogged
	droppedLogged time.Time // when the last overload line was written
}

// overloadLine starts the line memberlist writes for every message it
// drops because its handler queue is full. Under a gossip storm that is
// tens of thousands of lines a minute in every sidecar (`bench detect
// --members 128` after the whole machine stalled: 336 MB of logs in a few
// minutes), and writing them fed the overload. One is written each
// overloadEvery, with how many were dropped since.
const (
	overloadLine  = "handler queue full, dropping message"
	overloadEvery = 10 * time.Second
)

func (w *logWriter) Write(p []byte) (int, error) {
	level, msg := parseLogLine(strings.TrimRight(string(p), "\n"))
	if w.onSuspect != nil {
		if name, ok := suspectedMember(msg); ok {
			w.onSuspect(name)
		}
	}
	attrs := []any{slog.String("component", "memberlist")}
	if strings.HasPrefix(msg, overloadLine) {
		w.dropped++
		if now := time.Now(); now.Sub(w.droppedLogged) >= overloadEvery {
			attrs = append(attrs, slog.Int("lines", w.dropped)) // this one and those not written since the last
			w.dropped, w.droppedLogged = 0, now
		} else {
			return len(p), nil
		}
	}
	ctx := context.Background()
	if w.logger.Enabled(ctx, level) {
		w.logger.Log(ctx, level, msg, attrs...)
	}
	return len(p), nil
}

// routineFailures start memberlist lines that every death of a peer
// produces, over and over until it is declared dead and a while after. They
// say nothing the MemberDead event does not, so they are debug lines.
var routineFailures = []string{
	"Failed fallback TCP ping",
	"Failed to send gossip to",
	"Failed to send UDP ping",
	"Failed to send UDP compound ping",
	"Failed to send indirect UDP ping",
	"Failed UDP ping",
	// A connection that closes before it sends anything: a liveness
	// check of the gossip port (a peer's sidecar after its trainer's
	// collective failed, a TCP probe), not traffic of another job.
	`discarding stream with unacceptable label ""`,
}

// parseLogLine splits a memberlist line into a level and its text.
// memberlist's [ERR] lines all report a peer's or a packet's fault, never this
// process's, so they become warnings; unprefixed lines too.
func parseLogLine(line string) (slog.Level, string) {
	level := slog.LevelWarn
	if rest, ok := strings.CutPrefix(line, "["); ok {
		if tag, text, ok := strings.Cut(rest, "] "); ok {
			line = text
			switch tag {
			case "DEBUG", "TRACE":
				level = slog.LevelDebug
			case "INFO":
				level = slog.LevelInfo
			}
		}
	}
	msg := strings.TrimPrefix(line, "memberlist: ")
	for _, prefix := range routineFailures {
		if strings.HasPrefix(msg, prefix) {
			level = slog.LevelDebug
			break
		}
	}
	return level, msg
}

// suspectedMember recognises memberlist's "Failed UDP ping: NAME (timeout
// reached)" line, logged when NAME did not ack this member's direct probe
// within ProbeTimeout. That is this member's own observation; the indirect
// probes memberlist sends next are other members' (their nacks stay inside
// memberlist), and the sidecar asks for those itself: the members a vote
// sets checking. Acting at the direct probe's timeout, not at the end of
// the probe interval, takes ProbeInterval-ProbeTimeout off every
// detection.
func suspectedMember(msg string) (string, bool) {
	rest, ok := strings.CutPrefix(msg, "Failed UDP ping: ")
	if !ok {
		return "", false
	}
	name, ok := strings.CutSuffix(rest, " (timeout reached)")
	return name, ok && name != ""
}
