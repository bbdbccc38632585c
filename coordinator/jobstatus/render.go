package jobstatus

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"unicode/utf8"
)

// RenderOptions adds to what Render prints.
type RenderOptions struct {
	// Notes are printed after the table, one per line: for example a
	// demo's event log.
	Notes []string
}

// clearScreen moves the cursor home and erases the screen.
const clearScreen = "\x1b[H\x1b[2J"

// Render writes s as a plain-text table: a header line, a reason line, one
// row per member in ring order, the standby members, warnings and
// opts.Notes. Columns keep their minimum widths from one snapshot to the
// next and widen only for a longer id or address, so a redrawn view does
// not jump.
func Render(w io.Writer, s Snapshot, opts RenderOptions) error {
	var b bytes.Buffer
	render(&b, s, opts)
	_, err := w.Write(b.Bytes())
	return err
}

// RenderLive redraws s in place when w is a terminal: it clears the screen
// and writes the table in one Write, so the view does not flicker. On any
// other writer it is Render; such callers print only the snapshots that
// Changed.
func RenderLive(w io.Writer, s Snapshot, opts RenderOptions) error {
	var b bytes.Buffer
	if f, ok := w.(*os.File); ok && IsTerminal(f) {
		b.WriteString(clearScreen)
	}
	render(&b, s, opts)
	_, err := w.Write(b.Bytes())
	return err
}

func render(b *bytes.Buffer, s Snapshot, opts RenderOptions) {
	b.WriteString(header(s))
	b.WriteByte('\n')
	if s.Reason != "" {
		fmt.Fprintf(b, "reason: %s\n", s.Reason)
	}
	if s.Stopped != "" {
		fmt.Fprintf(b, "stopped: %s\n", s.Stopped)
	}
	if len(s.Finished) > 0 {
		fmt.Fprintf(b, "finished: %s\n", strings.Join(s.Finished, " "))
	}
	if len(s.Members) == 0 {
		fmt.Fprintf(b, "no members registered under /ringside/%s/%s/\n", s.Namespace, s.Job)
	} else {
		table(b, s.Members)
	}
	if len(s.Standby) > 0 {
		fmt.Fprintf(b, "standby: %s\n", strings.Join(s.Standby, " "))
	}
	for _, f := range s.Stragglers {
		fmt.Fprintf(b, "straggler: %s computes %.2fx the ring's median (%.3fs against %.3fs per step) since step %d; %s",
			f.Member, f.Ratio(), f.ComputeTimeS, f.MedianComputeTimeS, f.SinceStep, f.Action)
		if f.Node != "" {
			fmt.Fprintf(b, " (node %s)", f.Node)
		}
		b.WriteByte('\n')
	}
	for _, w := range s.Warnings {
		fmt.Fprintf(b, "warning: %s\n", w)
	}
	for _, n := range opts.Notes {
		b.WriteString(n)
		b.WriteByte('\n')
	}
}

func header(s Snapshot) string {
	parts := []string{fmt.Sprintf("job %s/%s", s.Namespace, s.Job)}
	if s.Generation == 0 {
		parts = append(parts, "no generation yet")
	} else {
		gen := fmt.Sprintf("generation %d", s.Generation)
		switch {
		case s.Stopped != "":
			gen += " STOPPED"
		case len(s.Finished) > 0:
			gen += " FINISHING"
		case s.Paused:
			gen += " PAUSED"
		}
		parts = append(parts, gen, fmt.Sprintf("world size %d", s.WorldSize))
		if s.Restarts > 0 {
			parts = append(parts, fmt.Sprintf("restarts %d", s.Restarts))
		}
	}
	parts = append(parts, "leader "+orDash(s.Leader))
	if s.Generation > 0 {
		parts = append(parts, "master "+orDash(s.Master), fmt.Sprintf("%.1f samples/s", s.Totals.SamplesPerSec))
	}
	if !s.Time.IsZero() {
		parts = append(parts, "at "+s.Time.Format("15:04:05"))
	}
	return strings.Join(parts, "  ")
}

// column is one column of the member table; min keeps widths stable.
type column struct {
	title string
	min   int
	right bool
	cell  func(Member) string
}

var columns = []column{
	{"RANK", 4, true, func(m Member) string { return rankCell(m.Rank) }},
	{"ID", 8, false, func(m Member) string { return m.ID }},
	{"ADDR", 15, false, func(m Member) string { return orDash(m.Addr) }},
	{"SLOTS", 5, true, func(m Member) string { return strconv.Itoa(m.Slots) }},
	{"STATE", 8, false, func(m Member) string { return string(m.State) }},
	{"STEP", 8, true, beat(func(m Member) string { return strconv.FormatInt(m.Step, 10) })},
	{"SAMPLES/S", 10, true, beat(func(m Member) string { return strconv.FormatFloat(m.SamplesPerSec, 'f', 1, 64) })},
	{"P50 STEP", 9, true, beat(func(m Member) string { return strconv.FormatFloat(m.StepTimeP50S, 'f', 3, 64) + "s" })},
	{"HEARTBEAT", 9, true, beat(func(m Member) string { return strconv.FormatFloat(*m.LastHeartbeatAgeS, 'f', 1, 64) + "s ago" })},
}

// beat shows "-" for a member whose sidecar has stored no status.
func beat(f func(Member) string) func(Member) string {
	return func(m Member) string {
		if m.LastHeartbeatAgeS == nil {
			return "-"
		}
		return f(m)
	}
}

func table(b *bytes.Buffer, members []Member) {
	rows := make([][]string, 0, len(members)+1)
	titles := make([]string, len(columns))
	widths := make([]int, len(columns))
	for i, c := range columns {
		titles[i], widths[i] = c.title, max(c.min, len(c.title))
	}
	rows = append(rows, titles)
	for _, m := range members {
		row := make([]string, len(columns))
		for i, c := range columns {
			row[i] = c.cell(m)
			widths[i] = max(widths[i], utf8.RuneCountInString(row[i]))
		}
		rows = append(rows, row)
	}
	for _, row := range rows {
		var line strings.Builder
		for i, cell := range row {
			if i > 0 {
				line.WriteString("  ")
			}
			pad := strings.Repeat(" ", widths[i]-utf8.RuneCountInString(cell))
			if columns[i].right {
				line.WriteString(pad + cell)
			} else {
				line.WriteString(cell + pad)
			}
		}
		b.WriteString(strings.TrimRight(line.String(), " "))
		b.WriteByte('\n')
	}
}

func rankCell(rank int) string {
	if rank < 0 {
		return "-"
	}
	return strconv.Itoa(rank)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
