package jobstatus

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"
)

// Printer writes the snapshots of a view that refreshes, in one of three
// ways: JSON lines (every snapshot), a view redrawn in place on a terminal
// (every snapshot), or plain text into a pipe or a log, where only the
// snapshots that Changed are printed so a log grows with events, not time.
type Printer struct {
	out    io.Writer
	asJSON bool
	live   bool
	prev   *Snapshot
}

// NewPrinter returns a Printer to out; it redraws in place when out is a
// terminal and asJSON is false.
func NewPrinter(out io.Writer, asJSON bool) *Printer {
	f, isFile := out.(*os.File)
	return &Printer{out: out, asJSON: asJSON, live: isFile && IsTerminal(f)}
}

// Once prints s alone, as JSON or as the table: a view that is not
// refreshed.
func (p *Printer) Once(s Snapshot) error {
	if p.asJSON {
		return json.NewEncoder(p.out).Encode(s)
	}
	return Render(p.out, s, RenderOptions{})
}

// Show prints s, the next snapshot of a refreshing view. With err, the
// read of s failed: a terminal keeps the last snapshot on screen with a
// note saying so, and the other outputs print nothing.
func (p *Printer) Show(s Snapshot, err error) error {
	if err != nil {
		if p.live && p.prev != nil && !p.asJSON {
			note := fmt.Sprintf("read failed at %s, showing the last snapshot: %v", time.Now().Format("15:04:05"), err)
			return RenderLive(p.out, *p.prev, RenderOptions{Notes: []string{note}})
		}
		return nil
	}
	changed := p.prev == nil || Changed(*p.prev, s)
	p.prev = &s
	switch {
	case p.asJSON:
		return json.NewEncoder(p.out).Encode(s)
	case p.live:
		return RenderLive(p.out, s, RenderOptions{})
	case changed:
		if err := Render(p.out, s, RenderOptions{}); err != nil {
			return err
		}
		_, err := fmt.Fprintln(p.out)
		return err
	}
	return nil
}
