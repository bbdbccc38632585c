package jobstatus

import (
	"os"

	"golang.org/x/term"
)

// IsTerminal reports whether f is a terminal, where RenderLive redraws in
// place; logs and pipes get only the snapshots that changed.
func IsTerminal(f *os.File) bool {
	return f != nil && term.IsTerminal(int(f.Fd()))
}
